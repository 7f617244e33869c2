#!/usr/bin/env bash
# Session 33's first call (<= 7 min, any card): GPU tests of session 32's last commits (never run on
# a GPU: the call signature's GPU, the grouped memo without count arrays, the rewritten cache tests,
# operand_tmaps and the router's map cache on gemm.remember / args_key), then s32_e's hit-rate check
# (host_profile.py with a device-path MoE training step holding its context until the backward).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s33_a.sh
source notes/debug/call_env.sh s33_a
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 8 gemm.hip grouped.hip mx.hip transpose.hip moe_fused.hip moe_route.hip moe_dispatch.hip moe_combine.hip moe_backward.hip
run "gpu tests" timeout 240 python3 -m pytest tests/gpu/test_gemm.py tests/gpu/test_grouped.py tests/gpu/test_mx.py tests/gpu/test_interop.py tests/gpu/test_moe_layer.py -q -x -p no:cacheprovider -rfE
for i in 1 2; do
  run "host uncached $i" timeout 90 python3 notes/debug/host_profile.py --calls 200 --uncached
  run "host cached $i" timeout 90 python3 notes/debug/host_profile.py --calls 200
done
grep -E "^=====|passed|failed|Error|host us per call|^  [a-zA-Z]" "$LOG" | grep -v "^  File" | cut -c1-200 | tail -80
printf '%s\n' "${summary[@]}"
