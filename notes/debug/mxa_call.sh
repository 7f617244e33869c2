#!/usr/bin/env bash
# Session 16: the MXFP8-A builder (A's codes dequantized by the builder itself): its GPU tests, the GEMM, TP, grouped and MoE layer tests (the builder and Problem changed), and bench/gemm.py --quick --precision mxfp8.
# KOSMOS_COMMIT=<sha> bash notes/debug/mxa_call.sh [tests|bench|all|all-tests (+ TP, grouped, MoE layer)]
source notes/debug/call_env.sh mxa
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
PART=${1:-all}
if [[ $PART != bench ]]; then
run "mx tests" timeout 240 python3 -m pytest tests/gpu/test_mx.py $T
run "gemm tests" timeout 150 python3 -m pytest tests/gpu/test_gemm.py $T
if [[ $PART == all-tests ]]; then
run "tp tests np1" timeout 150 python3 -m mpi4py -m pytest tests/gpu/test_tp.py tests/gpu/test_tp_mx.py $T
run "grouped + moe layer np1" timeout 150 python3 -m mpi4py -m pytest tests/gpu/test_grouped.py tests/gpu/test_moe_layer.py $T
fi
fi
if [[ $PART != tests ]]; then
run "bench gemm mxfp8" timeout 200 python3 bench/gemm.py --quick --precision mxfp8 --caps 132 --out "$RUNS"
fi
cp $RUNS/*.json "$OUT"/ 2>/dev/null
grep -E "^(FAILED|ERROR) |passed|failed|Error" "$LOG" | head -30
grep -A12 "# summary" "$LOG" | tail -12
printf '%s\n' "${summary[@]}"
