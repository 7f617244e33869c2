#!/usr/bin/env bash
# Session 27 (<= 8 min): the router GEMM split along K at small token counts (notes/patches/
# router_splits.patch, branch s26-router-splits; kosmos/moe/route.py router_splits, router.h
# sum_router_partials; the device path's router GEMM takes the same split_k). s26_g's trace: the
# router GEMM's few tiles leave most CTAs waiting (DeepSeek-V3 1,024 tokens: 8 tiles, 69 us; Qwen3-30B
# 512 tokens: 4 tiles, 24 us). The Python side changed too, so the A/B is two processes: this tree
# (patched) and build/old_tree (main's kosmos + hipsrc + bench, carried; `git archive HEAD kosmos
# hipsrc bench | tar -x -C build/old_tree`, drop its bench/results), one after the other.
# Tests: the routing in the launch bitwise route() on the split logits ("small": 4 splits, "big": 2),
# the fused forward bitwise the device path, at np 1 and 2 (oversubscribed: correctness only).
# Predicted (H100): fused forward DeepSeek-V3 256 -0.04..-0.06 ms (of ~1.8), Qwen3-30B 256 -0.012..
# -0.018 ms (of ~0.22); 2,048 rows within noise.
#   KOSMOS_COMMIT=<sha>+router_splits bash notes/debug/s27_c.sh
source notes/debug/call_env.sh s27_c
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
git apply notes/patches/router_splits.patch >> "$LOG" 2>&1 || { echo "patch does not apply" | tee -a "$LOG"; exit 1; }
(cd build/old_tree && PYTHONPATH=$PWD timeout 240 python3 -m kosmos.runtime.warm --jobs 4 > "$OUT/warm_old.log" 2>&1) &
warm_old=$!
run "warm new" timeout 240 python3 -m kosmos.runtime.warm --jobs 6
wait $warm_old
cat "$OUT/warm_old.log" >> "$LOG"
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "route+fused np1" timeout 150 python3 -m pytest tests/gpu/test_moe_forward.py tests/gpu/test_moe_layer.py \
  -k "routing_in_the_launch or fused_is_bitwise or forward_matches" $T
run "route+fused np2" timeout 90 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_forward.py \
  tests/gpu/test_moe_layer.py -k "routing_in_the_launch or fused_is_bitwise" $T
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 15 --warmup 3 --out $RUNS --tag s27"
run "bench fwd new" timeout 80 python3 bench/moe.py $B
run "bench fwd old" bash -c "cd build/old_tree && PYTHONPATH=\$PWD timeout 80 python3 bench/moe.py $B"
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|^(ok|FAIL) |compiled|^(FAILED|ERROR) |passed|failed|rows/exp|fused|Error|patch" "$LOG" | cut -c1-240 | tail -50
printf '%s\n' "${summary[@]}"
