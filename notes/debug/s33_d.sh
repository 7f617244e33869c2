#!/usr/bin/env bash
# Session 33's second call (<= 3 min, any card): the wgmma rate per tile width and B layout alone
# (notes/debug/wgmma_rate.py: is N = 224 / 160 slow in the instruction, or in our pipeline?), then
# host_profile.py with only MoEForward's memo bypassed and not (the memo's own share of the fused
# forward's host time; the layer's held buffers stay in both).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s33_d.sh
source notes/debug/call_env.sh s33_d
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "wgmma rate" timeout 120 python3 notes/debug/wgmma_rate.py
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 8 gemm.hip grouped.hip moe_fused.hip moe_route.hip moe_dispatch.hip moe_combine.hip moe_backward.hip
run "host moe memo bypassed" timeout 90 python3 notes/debug/host_profile.py --calls 200 --uncached-moe
run "host cached" timeout 90 python3 notes/debug/host_profile.py --calls 200
grep -E "^=====|Error|K-major|MN-major|CTAs x|host us per call|^  [a-zA-Z]" "$LOG" | grep -v "^  File" | cut -c1-200 | tail -50
printf '%s\n' "${summary[@]}"
