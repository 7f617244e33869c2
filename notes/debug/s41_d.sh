#!/usr/bin/env bash
# main after session 41's merges (the early count publish and the plan scans, measured on main +
# eight slots in s41_a / s41_b; four lanes a token with eight slots, measured in s40_e): the two
# were never run together. The MoE GPU tests at np 1 and the routing + forward at np 2
# (oversubscribed: correctness only), then the real-E phase traces (--ranks 8) as the next
# session's baseline. ~4 min.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s41_d.sh
source notes/debug/call_env.sh s41_d
stamp() { echo "----- $(date +%T) $*" >> "$LOG"; }
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
stamp start
run "warm" timeout 250 python3 -m kosmos.runtime.warm --jobs 10 moe_fused_forward.hip moe_fused_backward_f32.hip \
  moe_fused_backward_bf16.hip moe_dispatch.hip moe_combine.hip moe_route.hip moe_backward.hip grouped.hip gemm.hip timing.hip
stamp warmed
run "moe np1" timeout 250 python3 -m pytest tests/gpu/test_moe_route.py tests/gpu/test_moe_forward.py \
  tests/gpu/test_moe_backward_fused.py tests/gpu/test_moe_layer.py tests/gpu/test_moe_dispatch.py tests/gpu/test_moe_combine.py $T
stamp tested
run "moe route/forward np2" timeout 120 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_route.py \
  tests/gpu/test_moe_forward.py $T
stamp tested2
real_e_traces
stamp traced
grep -E "^=====|^-----|passed|failed|^(FAILED|ERROR) |router|routed|plan placed|dispatch part|GEMM1|combine done|Error" "$LOG" \
  | grep -v "^  job" | cut -c1-200 | tail -50
printf '%s\n' "${summary[@]}"
