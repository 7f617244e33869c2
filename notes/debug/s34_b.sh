#!/usr/bin/env bash
# Session 34's second call (<= 8 min, any card): the fused backward's argument memo and
# DeviceRecord's skipped puts (d63c11b), never run on a GPU: the record tests, the fused backward's
# tests (the memo test among them), the layer's tests at np 1; then host_profile.py's fused step
# with the MoE memos bypassed (--uncached-moe: before) and not (after), back to back, and a cProfile
# of the cached step (where the rest goes).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s34_b.sh
source notes/debug/call_env.sh s34_b
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
T="-q -p no:cacheprovider --timeout=240 --timeout-method=thread -rfE --color=no"
run "warm moe" timeout 200 python3 -m kosmos.runtime.warm --jobs 4 moe_fused.hip moe_backward.hip grouped.hip gemm.hip
run "records" timeout 60 python3 -m pytest tests/gpu/test_runtime.py -k device_record $T
run "bwd fused np1" timeout 200 python3 -m pytest tests/gpu/test_moe_backward_fused.py $T
run "layer np1" timeout 240 python3 -m pytest tests/gpu/test_moe_layer.py $T
run "host before" timeout 90 python3 notes/debug/host_profile.py --calls 200 --only "fused forward" --uncached-moe
run "host after" timeout 90 python3 notes/debug/host_profile.py --calls 200 --only "fused forward" --profile --top 30
grep -E "^=====|passed|failed|Error|host us|  MoELayer|  the fused" "$LOG" | cut -c1-220 | tail -40
printf '%s\n' "${summary[@]}"
