#!/usr/bin/env bash
# Session 17, second call: A = the idle-warpgroup experiment (notes/debug/idle_wg.py), MXFP8 + GEMM
# tests, bench/gemm.py --quick --precision mxfp8; B = grouped, MoE and TP tests at np 1.
# (notes/debug/idle_wg.py and its KOSMOS_IDLE_WG switch live at 656295e only: git checkout 656295e to rerun A.)
# KOSMOS_COMMIT=<sha> bash notes/debug/s17_call2.sh A|B
source notes/debug/call_env.sh s17_$1
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
if [[ $1 == A ]]; then
run "idle wg" timeout 220 python3 notes/debug/idle_wg.py
run "mx tests" timeout 120 python3 -m pytest tests/gpu/test_mx.py $T
run "gemm tests" timeout 120 python3 -m pytest tests/gpu/test_gemm.py $T
run "bench gemm mxfp8" timeout 200 python3 bench/gemm.py --quick --precision mxfp8 --caps 132 --out "$RUNS"
else
run "grouped + moe np1" timeout 300 python3 -m mpi4py -m pytest tests/gpu/test_grouped.py tests/gpu/test_moe_forward.py tests/gpu/test_moe_backward_fused.py tests/gpu/test_moe_layer.py tests/gpu/test_moe_dispatch.py $T
run "tp np1" timeout 200 python3 -m mpi4py -m pytest tests/gpu/test_tp.py tests/gpu/test_tp_mx.py $T
fi
cp $RUNS/*.json "$OUT"/ 2>/dev/null
grep -E "^(FAILED|ERROR) |passed|failed|Error|off/on|geomean" "$LOG" | head -60
grep -A12 "# summary" "$LOG" | tail -12
printf '%s\n' "${summary[@]}"
