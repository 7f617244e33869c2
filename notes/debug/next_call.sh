#!/usr/bin/env bash
# Session 15's first device call (~9 min): the TP ops on the 192 tile and the MXFP8 dequantize
# over rows (np 1, np 2), the side copy test and probe, bench/tp.py --quick, the MXFP8 GEMM bench. KOSMOS_COMMIT=<sha> bash notes/debug/next_call.sh
source notes/debug/call_env.sh next
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no"
TP="tests/gpu/test_tp.py tests/gpu/test_tp_mx.py tests/gpu/test_protocol.py tests/gpu/test_mx.py tests/gpu/test_collectives.py"
PART=${1:-all}  # tests | bench | all (a call is limited to 600 s: run the parts as two calls)
if [[ $PART != bench ]]; then
run "gemm tests" timeout 200 python3 -m pytest tests/gpu/test_gemm.py $T
run "moe layer tests np1" timeout 120 python3 -m mpi4py -m pytest tests/gpu/test_moe_layer.py $T
run "tp tests np1" timeout 120 python3 -m mpi4py -m pytest $TP $T
run "tp tests np2" timeout 140 $MPIRUN -np 2 python3 -m mpi4py -m pytest $TP $T
fi
if [[ $PART != tests ]]; then
run "side copy probe" timeout 120 python3 notes/debug/side_copy.py
run "bench tp quick" timeout 250 python3 bench/tp.py --quick --out "$RUNS"
run "bench gemm mxfp8" timeout 180 python3 bench/gemm.py --quick --precision mxfp8 --caps 132 --out "$RUNS"
fi
cp $RUNS/*.json "$OUT"/ 2>/dev/null
grep -E "^(FAILED|ERROR) |passed|failed" "$LOG" | head -20
sed -n '/^===== side copy/,/^===== bench/p' "$LOG"
grep -A30 "summary" "$LOG" | tail -30
printf '%s\n' "${summary[@]}"
