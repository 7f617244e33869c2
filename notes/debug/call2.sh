#!/usr/bin/env bash
# Session 12's second device call (~7 min): KOSMOS_COMMIT=<sha> bash notes/debug/call2.sh
# MoELayer path "fused" now runs MoEBackward: test_moe_layer at np 1, 2, 4 (fused == device bitwise,
# gradients included); AG+NN(+NT) in one builder call: test_tp_mx at np 2; then the backward bench.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KOSMOS_WAIT_BUDGET_S=10
export KOSMOS_COMMIT=${KOSMOS_COMMIT:-unknown}
OUT=${OUT:-/tmp/kosmos_call2}; mkdir -p "$OUT"; LOG=$OUT/call2.log
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none -x KOSMOS_COMMIT -x PYTHONPATH -x PYTHONUNBUFFERED -x KOSMOS_WAIT_BUDGET_S"
source bench/suite_lib.sh
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no"
run "moe layer np1" timeout 150 python3 -m mpi4py -m pytest tests/gpu/test_moe_layer.py tests/gpu/test_moe_backward_fused.py $T
run "moe layer np2" timeout 200 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_layer.py $T
run "moe layer np4" timeout 240 $MPIRUN -np 4 python3 -m mpi4py -m pytest tests/gpu/test_moe_layer.py tests/gpu/test_moe_backward_fused.py $T
run "tp_mx np2" timeout 150 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_tp_mx.py $T
run "bench moe backward" timeout 240 python3 bench/moe.py --backward --models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 10 --warmup 3 --out "$OUT" --tag call2
grep -E "^(FAILED|ERROR) |passed|failed" "$LOG" | sort | uniq -c | head -30
grep -E "rows/exp" "$LOG"
printf '%s\n' "${summary[@]}"
