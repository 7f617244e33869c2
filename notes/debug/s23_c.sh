#!/usr/bin/env bash
# Session 23's third device call (<= 10 min): the phase trace of the fused MoE kernels at 2,048 rows
# per expert (trace slots widened to 32: the backward's ten jobs overran the old 16, s23_a's
# illegal address), then the whole tests/gpu at np 1.   KOSMOS_COMMIT=<sha> bash notes/debug/s23_c.sh
source notes/debug/call_env.sh s23_c
run "phases DS-V3" timeout 200 python3 notes/debug/phases.py --model DeepSeek-V3 --rows 2048 --crew 8,0
run "phases Qwen3-30B" timeout 80 python3 notes/debug/phases.py --model Qwen3-30B-A3B --rows 2048
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no"
run "gpu np1" timeout 300 python3 -m pytest tests/gpu $T
grep -E "^=====|^(FAILED|ERROR) |passed|failed|^  |^(forward|backward):|Error" "$LOG" | cut -c1-220 | tail -90
printf '%s\n' "${summary[@]}"
