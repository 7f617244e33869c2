#!/usr/bin/env bash
# Session 15's last device call (~5 min): the bulk RS || NT on stream-K (tests np 1 and 2, bench
# tp --quick), the MoE layer tests on the side pushes' default (movers 0), the grouped GEMM bench
# and the SM-cap rows of bench/gemm.py --quick. KOSMOS_COMMIT=<sha> bash notes/debug/final_call.sh
source notes/debug/call_env.sh final
T="-q -p no:cacheprovider --timeout=100 --timeout-method=thread -rfE --color=no"
TP="tests/gpu/test_tp.py tests/gpu/test_tp_mx.py"
run "tp tests np1" timeout 100 python3 -m mpi4py -m pytest $TP $T
run "tp tests np2" timeout 100 $MPIRUN -np 2 python3 -m mpi4py -m pytest $TP $T
run "moe layer np1" timeout 90 python3 -m mpi4py -m pytest tests/gpu/test_moe_layer.py $T
run "bench tp quick" timeout 90 python3 bench/tp.py --quick --out "$RUNS"
run "bench grouped quick" timeout 120 python3 bench/grouped_gemm.py --quick --out "$RUNS"
run "bench gemm caps" timeout 100 python3 bench/gemm.py --quick --caps 132,116 --out "$RUNS"
cp $RUNS/*.json "$OUT"/ 2>/dev/null
grep -E "^(FAILED|ERROR) |passed|failed" "$LOG" | head -20
grep -A8 "^kernel  *shapes" "$LOG"
grep -iE "geomean|summary|^group|^[A-Za-z0-9-]+ +(GEMM|gemm)" "$LOG" | tail -30
printf '%s\n' "${summary[@]}"
