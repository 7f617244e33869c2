#!/usr/bin/env bash
# Session 12's third device call (~7 min): KOSMOS_COMMIT=<sha> bash notes/debug/call3.sh
# 1. MoEBackward's job order (A B C D, the default, against A C B D: KOSMOS_MOE_BWD_ORDER=1) and
#    combine crew (0, 8, auto = grid/8), timed at world 1; order 1's bitwise test at np 1 and 2.
# 0. phase timelines of the fused forward and backward (notes/debug/phases.py). 2. MoEForward's movers x crew sweep. 3. bench/tp.py --quick (the job-list builder, untimed since).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KOSMOS_WAIT_BUDGET_S=10
export KOSMOS_COMMIT=${KOSMOS_COMMIT:-unknown}
OUT=${OUT:-/tmp/kosmos_call3}; mkdir -p "$OUT"; LOG=$OUT/call3.log
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none -x KOSMOS_COMMIT -x PYTHONPATH -x PYTHONUNBUFFERED -x KOSMOS_WAIT_BUDGET_S -x KOSMOS_HIPSRC"
source bench/suite_lib.sh
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no"
M="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 10 --warmup 3"
run "phases qwen 2048" timeout 90 python3 notes/debug/phases.py --model Qwen3-30B-A3B --rows 2048
run "phases qwen 2048 crew 0" timeout 90 python3 notes/debug/phases.py --model Qwen3-30B-A3B --rows 2048 --crew 0
run "bwd order 0" timeout 150 python3 bench/moe.py --backward $M --crew 0,8,auto --out "$OUT" --tag order0
d=/tmp/hipsrc_order1; rm -rf $d; cp -r hipsrc $d
sed -i '1i #define KOSMOS_MOE_BWD_ORDER 1' $d/moe_fused.hip
export KOSMOS_HIPSRC=$d
run "bwd order 1 test np1" timeout 100 python3 -m mpi4py -m pytest tests/gpu/test_moe_backward_fused.py $T
run "bwd order 1 test np2" timeout 100 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_backward_fused.py $T
run "bwd order 1" timeout 150 python3 bench/moe.py --backward $M --crew 0,8,auto --out "$OUT" --tag order1
unset KOSMOS_HIPSRC
run "fwd sweep" timeout 200 python3 bench/moe.py $M --crew 0,8,16,auto --movers 8,auto --out "$OUT" --tag fwdsweep
run "bench tp quick" timeout 200 python3 bench/tp.py --quick --out "$OUT"
sed -n '/^===== phases/,/^===== bwd order 0/p' "$LOG" | grep -v "^=====" | head -60
grep -E "^=====|rows/exp|fused backward|fused m=" "$LOG" | cut -c1-400
grep -E "^(FAILED|ERROR) |passed|failed" "$LOG" | head
grep -E "geomean|geometric|summary" -A8 "$LOG" | tail -20
printf '%s\n' "${summary[@]}"
