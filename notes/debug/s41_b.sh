#!/usr/bin/env bash
# After s41_a.sh on the same machine (its kernel cache): main + topn8 + notes/debug/s41_prefix.patch
# through the rest of its GPU tests -- the fused backward (its dispatch and combine tables changed
# too) at np 1, the forward, dispatch and combine at np 2 (oversubscribed: the early publish's
# cross-rank protocol; correctness only).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s41_b.sh
source notes/debug/call_env.sh s41_b
stamp() { echo "----- $(date +%T) $*" >> "$LOG"; }
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
git apply notes/debug/s40_topn8.patch >> "$LOG" 2>&1 && git apply notes/debug/s41_prefix.patch >> "$LOG" 2>&1 \
  || { echo "patches: no apply" | tee -a "$LOG"; exit 1; }
stamp start
run "warm" timeout 250 python3 -m kosmos.runtime.warm --jobs 9 moe_fused_forward.hip moe_fused_backward_f32.hip \
  moe_fused_backward_bf16.hip moe_dispatch.hip moe_combine.hip moe_route.hip moe_backward.hip grouped.hip gemm.hip
stamp warmed
run "prefix: backward/layer np1" timeout 200 python3 -m pytest tests/gpu/test_moe_backward_fused.py tests/gpu/test_moe_layer.py $T
stamp tested
run "prefix: forward/dispatch/combine np2" timeout 200 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_forward.py \
  tests/gpu/test_moe_dispatch.py tests/gpu/test_moe_combine.py $T
stamp tested2
grep -E "^=====|^-----|passed|failed|^(FAILED|ERROR) |Error" "$LOG" | cut -c1-200 | tail -40
printf '%s\n' "${summary[@]}"
