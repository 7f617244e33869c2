#!/usr/bin/env bash
# Session 16's first device call (~7 min): a full test pass at HEAD (GEMM, TP incl. stream-K at np 1
# and 2, MXFP8, MoE layer) and the MXFP8 GEMM bench as the "before" of the A-in-registers path.
# KOSMOS_COMMIT=<sha> bash notes/debug/s16_call.sh
source notes/debug/call_env.sh s16
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
TP="tests/gpu/test_tp.py tests/gpu/test_tp_mx.py tests/gpu/test_mx.py"
run "gemm tests" timeout 200 python3 -m pytest tests/gpu/test_gemm.py $T
run "tp tests np1" timeout 150 python3 -m mpi4py -m pytest $TP $T
run "tp stream-k np2" timeout 100 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_tp.py -k stream $T
run "moe layer tests np1" timeout 100 python3 -m mpi4py -m pytest tests/gpu/test_moe_layer.py $T
run "bench gemm mxfp8" timeout 150 python3 bench/gemm.py --quick --precision mxfp8 --caps 132 --out "$RUNS"
cp $RUNS/*.json "$OUT"/ 2>/dev/null
grep -E "^(FAILED|ERROR) |passed|failed" "$LOG" | head -20
grep -A30 "summary" "$LOG" | tail -30
printf '%s\n' "${summary[@]}"
