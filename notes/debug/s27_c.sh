#!/usr/bin/env bash
# Session 27 (<= 9.5 min): the routing prefix of the MoE forward launch at small token counts, two
# patches (s26_g's trace: DeepSeek-V3 1,024 tokens 146 us before the builders start, Qwen3-30B 512
# tokens 65 us): notes/patches/router_splits.patch (the router GEMM split along K, summed in the
# launch; the device path's router GEMM takes the same split_k: Python changed) and
# notes/patches/route_warp.patch (rounds of few tokens routed a token a warp, route_warp.h: the same
# bits as a thread a token; hipsrc only). This tree = main + both; /tmp/tree_rs = main + router_splits
# only (tree B: route_warp's own effect, interleaved in one run); build/old_tree = main (carried;
# `git archive HEAD kosmos hipsrc bench | tar -x -C build/old_tree`, drop its bench/results): the
# pair's effect, in a second process. Tests: the routing in the launch bitwise route() (small: 4
# splits, warp rounds; big: 2 splits, warp rounds; many: thread rounds then a warp round), the
# fused forward bitwise the device path, the captured step (hidden 1,024: splits in the graph), np 1
# and 2 (oversubscribed: correctness only). Predicted (H100): fused forward DeepSeek-V3 256 -0.08..
# -0.1 ms, Qwen3-30B 256 -0.02..-0.03 ms; at 2,048 rows -0.05 ms (DeepSeek-V3), -0.015 (Qwen3-30B).
#   KOSMOS_COMMIT=<sha>+router_splits+route_warp bash notes/debug/s27_c.sh
source notes/debug/call_env.sh s27_c
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
git apply notes/patches/router_splits.patch >> "$LOG" 2>&1 || { echo "router_splits does not apply" | tee -a "$LOG"; exit 1; }
rm -rf /tmp/tree_rs && mkdir -p /tmp/tree_rs && cp -r hipsrc /tmp/tree_rs/
git apply notes/patches/route_warp.patch >> "$LOG" 2>&1 || { echo "route_warp does not apply" | tee -a "$LOG"; exit 1; }
(cd build/old_tree && PYTHONPATH=$PWD timeout 280 python3 -m kosmos.runtime.warm --jobs 11 moe_fused.hip moe_backward.hip moe_dispatch.hip moe_combine.hip moe_route.hip grouped.hip gemm.hip symmetric.hip collectives.hip timing.hip records.hip > "$OUT/warm_old.log" 2>&1) &
warm_old=$!
KOSMOS_HIPSRC=/tmp/tree_rs/hipsrc timeout 280 python3 -m kosmos.runtime.warm --jobs 5 moe_fused.hip moe_backward.hip moe_dispatch.hip moe_combine.hip moe_route.hip > "$OUT/warm_b.log" 2>&1 &
warm_b=$!
run "warm new" timeout 280 python3 -m kosmos.runtime.warm --jobs 11 moe_fused.hip moe_backward.hip moe_dispatch.hip moe_combine.hip moe_route.hip grouped.hip gemm.hip symmetric.hip collectives.hip timing.hip records.hip
wait $warm_old $warm_b
cat "$OUT/warm_old.log" "$OUT/warm_b.log" >> "$LOG"
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
K="routing_in_the_launch or fused_is_bitwise or forward_matches or captured_step"
run "route+fused np1" timeout 170 python3 -m pytest tests/gpu/test_moe_forward.py tests/gpu/test_moe_layer.py -k "$K" $T
run "route+fused np2" timeout 100 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_forward.py \
  tests/gpu/test_moe_layer.py -k "routing_in_the_launch or fused_is_bitwise" $T
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 15 --warmup 3 --out $RUNS --tag s27"
run "bench fwd new, B = router_splits only" timeout 90 python3 bench/moe.py $B --tree-b /tmp/tree_rs/hipsrc
run "bench fwd old" bash -c "cd build/old_tree && PYTHONPATH=\$PWD timeout 70 python3 bench/moe.py $B"
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|^(ok|FAIL) |compiled|^(FAILED|ERROR) |passed|failed|rows/exp|fused|Error|patch|apply" "$LOG" | cut -c1-240 | tail -50
printf '%s\n' "${summary[@]}"
