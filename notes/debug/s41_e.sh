#!/usr/bin/env bash
# main after session 41's merges (early publish + plan scans; four lanes a token, never run
# together) as tree B, and tree A = main + notes/debug/s41_realE.patch (branch real-e-prefix: the
# round's logits rows staged in shared memory; place_chunks' totals column-wise). GPU tests on A
# (routing, forward, layer, fused backward np 1; routing + forward np 2, oversubscribed: correctness
# only), then the real-E phase traces (--ranks 8), A and B, then the share's forward A/B.
# Predicted (H100, real E): the routing step (routed - logits summed) 21 -> ~8 us (Qwen3-30B),
# 63 -> ~20 us (DeepSeek-V3); "routed + counted -> plan placed" 19 -> ~8 and 54 -> ~12 us.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s41_e.sh
source notes/debug/call_env.sh s41_e
stamp() { echo "----- $(date +%T) $*" >> "$LOG"; }
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
stamp start
patch_over_main notes/debug/s41_realE.patch moe_fused_forward.hip moe_route.hip
run "warm rest" timeout 200 python3 -m kosmos.runtime.warm --jobs 8 moe_fused_backward_f32.hip moe_fused_backward_bf16.hip \
  moe_dispatch.hip moe_combine.hip moe_backward.hip grouped.hip gemm.hip timing.hip
stamp warmed
run "A: moe route/forward/layer/backward np1" timeout 200 python3 -m pytest tests/gpu/test_moe_route.py \
  tests/gpu/test_moe_forward.py tests/gpu/test_moe_layer.py tests/gpu/test_moe_backward_fused.py $T
stamp tested
run "A: moe route/forward np2" timeout 100 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_route.py \
  tests/gpu/test_moe_forward.py $T
stamp tested2
real_e_traces AB
stamp traced
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 15 --warmup 3 --tree-b /tmp/tree_main/hipsrc --out $RUNS"
run "fwd A/B" timeout 100 python3 bench/moe.py $B --tag s41e
cp "$RUNS"/moe*.json "$OUT"/ 2>/dev/null
stamp benched
grep -E "^=====|^-----|passed|failed|^(FAILED|ERROR) |rows/exp|fused|router|routed|plan placed|dispatch part|combine done|Error" "$LOG" \
  | grep -v "^  job" | cut -c1-200 | tail -70
printf '%s\n' "${summary[@]}"
