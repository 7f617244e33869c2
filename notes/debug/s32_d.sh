#!/usr/bin/env bash
# Session 32's last call (<= 7 min, any card): the checked-call caches (kosmos.runtime.call_cache,
# the plans' argument memos) and grid_first_claim, as landed. GPU tests of everything that calls
# matmul / grouped_matmul (the MXFP8-A plans memo their arguments too; interop passes foreign
# arrays, which take the checked path), then host_profile.py with the caches bypassed and not,
# twice each in turn (A/B in one process each; host timings vary run to run), and one cProfile.
# Prediction: kosmos.matmul 85 -> ~40-50 us, grouped_matmul 80 -> ~35-45 us of host time a call;
# the MoE forwards unchanged but for the device path's two grouped GEMMs.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s32_d.sh
source notes/debug/call_env.sh s32_d
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 8 gemm.hip grouped.hip mx.hip transpose.hip moe_fused.hip moe_route.hip moe_dispatch.hip moe_combine.hip
run "gpu tests" timeout 240 python3 -m pytest tests/gpu/test_gemm.py tests/gpu/test_grouped.py tests/gpu/test_mx.py tests/gpu/test_interop.py tests/gpu/test_moe_layer.py -q -x -p no:cacheprovider
for i in 1 2; do
  run "host uncached $i" timeout 90 python3 notes/debug/host_profile.py --calls 300 --uncached
  run "host cached $i" timeout 90 python3 notes/debug/host_profile.py --calls 300
done
run "host cached profile" timeout 90 python3 notes/debug/host_profile.py --calls 200 --profile --top 14
grep -E "^=====|passed|failed|Error|host us per call|^  [a-zA-Z]" "$LOG" | grep -v "^  File" | cut -c1-200 | tail -80
printf '%s\n' "${summary[@]}"
