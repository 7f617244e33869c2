#!/usr/bin/env bash
# Session 27, call 4: side_prefetch.patch split. Only its router_grads.h part (router_pairs.patch:
# a token's d w pairs eight at a time, bitwise old) against main, backward only (the side and
# fold prefetches made the forward slower at Qwen3-30B in s27_a). bench --backward --tree-b B = main.
#   KOSMOS_COMMIT=<sha>+router_pairs bash notes/debug/s27_d.sh
source notes/debug/call_env.sh s27_d
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
rm -rf /tmp/tree_main && mkdir -p /tmp/tree_main && cp -r hipsrc /tmp/tree_main/
git apply notes/patches/router_pairs.patch >> "$LOG" 2>&1 || { echo "patch does not apply" | tee -a "$LOG"; exit 1; }
KOSMOS_HIPSRC=/tmp/tree_main/hipsrc timeout 240 python3 -m kosmos.runtime.warm --jobs 5 moe_fused.hip moe_backward.hip moe_dispatch.hip moe_combine.hip moe_route.hip > "$OUT/warm_b.log" 2>&1 &
warm_b=$!
run "warm A" timeout 240 python3 -m kosmos.runtime.warm --jobs 11 moe_fused.hip moe_backward.hip moe_dispatch.hip moe_combine.hip moe_route.hip grouped.hip gemm.hip symmetric.hip collectives.hip timing.hip records.hip
wait $warm_b
cat "$OUT/warm_b.log" >> "$LOG"
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "fused bitwise np1" timeout 170 python3 -m pytest tests/gpu/test_moe_backward_fused.py -k "bitwise or router" $T
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 15 --warmup 3 --out $RUNS --tag s27 --tree-b /tmp/tree_main/hipsrc"
run "bench bwd A/B" timeout 100 python3 bench/moe.py --backward $B
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|^(ok|FAIL) |compiled|^(FAILED|ERROR) |passed|failed|rows/exp|fused|Error|patch" "$LOG" | cut -c1-240 | tail -50
printf '%s\n' "${summary[@]}"
