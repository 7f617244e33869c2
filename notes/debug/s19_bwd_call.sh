#!/usr/bin/env bash
# Session 19: the experts' backward, fused launch against separate launches and each GEMM alone.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s19_bwd_call.sh
source notes/debug/call_env.sh s19e
run "bwd jobs" timeout 300 python3 notes/debug/bwd_jobs.py --models DeepSeek-V3,Qwen3-30B-A3B --rows 256,2048
run "bwd jobs crew 0" timeout 200 python3 notes/debug/bwd_jobs.py --models DeepSeek-V3 --rows 2048 --crew 0
grep -vE "^\s*$" "$LOG" | grep -vi warn | tail -60
printf '%s\n' "${summary[@]}"
