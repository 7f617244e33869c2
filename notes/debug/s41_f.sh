#!/usr/bin/env bash
# s41_e.sh cut to what ~4 minutes of device time holds: tree A = main + notes/debug/s41_realE.patch,
# B = main. Routing + forward tests on A at np 1, then the real-E phase traces (--ranks 8), A and B.
# Predictions as s41_e.sh's.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s41_f.sh
source notes/debug/call_env.sh s41_f
stamp() { echo "----- $(date +%T) $*" >> "$LOG"; }
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
stamp start
patch_over_main notes/debug/s41_realE.patch moe_fused_forward.hip moe_route.hip
stamp warmed
run "A: moe route/forward np1" timeout 150 python3 -m pytest tests/gpu/test_moe_route.py tests/gpu/test_moe_forward.py $T
stamp tested
real_e_traces AB
stamp traced
grep -E "^=====|^-----|passed|failed|^(FAILED|ERROR) |router|routed|plan placed|dispatch part|combine done|Error" "$LOG" \
  | grep -v "^  job" | cut -c1-200 | tail -60
printf '%s\n' "${summary[@]}"
