#!/usr/bin/env bash
# Session 32's hit-rate check (<= 5 min, any card): host_profile.py with a training step of the
# device-path MoE layer (forward, then backward holding the context) beside the single calls, the
# checked-call caches' hits counted per contender, bypassed and not, twice each in turn. Question:
# do the caches still hit when the arrays come fresh from CuPy's pool each step (gate_up, hmid)?
#   KOSMOS_COMMIT=<sha> bash notes/debug/s32_e.sh
source notes/debug/call_env.sh s32_e
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 8 gemm.hip grouped.hip moe_fused.hip moe_route.hip moe_dispatch.hip moe_combine.hip moe_backward.hip
for i in 1 2; do
  run "host uncached $i" timeout 90 python3 notes/debug/host_profile.py --calls 200 --uncached
  run "host cached $i" timeout 90 python3 notes/debug/host_profile.py --calls 200
done
grep -E "^=====|Error|host us per call|^  " "$LOG" | grep -v "^  File" | cut -c1-200 | tail -50
printf '%s\n' "${summary[@]}"
