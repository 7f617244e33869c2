#!/usr/bin/env bash
# The next session's first device call (written in session 11; ~9 min): KOSMOS_COMMIT=<sha> bash notes/debug/next_call.sh
# 1. the register trade alone (setmaxnreg_probe.py); 2. MoEForward's plans 2 and 3, which hung before
# the ring-position fix (traced if one still hangs); 3. the whole suite at np 1 (the builder's
# job-list form and the fix, never run); 4. MoEBackward's test at np 1 and 2 (never run); 5.
# bench/gemm.py --quick.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KOSMOS_WAIT_BUDGET_S=10 KOSMOS_PYTEST_ARGS=--timeout-method=thread
export KOSMOS_COMMIT=${KOSMOS_COMMIT:-unknown}
OUT=${OUT:-/tmp/kosmos_next}; mkdir -p "$OUT"; LOG=$OUT/next.log
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none -x KOSMOS_COMMIT -x PYTHONPATH -x PYTHONUNBUFFERED -x KOSMOS_WAIT_BUDGET_S"
source bench/suite_lib.sh
run "setmaxnreg probe" timeout 90 python3 notes/debug/setmaxnreg_probe.py 200000
# plans 2 and 3 hung (1 call in 45-800) before the ring-position fix; clean now if it was the cause
for v in 2 3; do
  d=/tmp/hipsrc_plan$v; rm -rf $d; cp -r hipsrc $d
  sed -i "s/^#define KOSMOS_MOE_FWD_MOVE_REGS .*/#define KOSMOS_MOE_FWD_MOVE_REGS $v/" $d/moe_fused.hip
  KOSMOS_HIPSRC=$d ITERS=1500 WATCH=6 run "plan $v x1500" timeout 120 python3 notes/debug/hang.py both
  if grep -q "^HANG" "$LOG"; then  # still hangs: where is every warp of the stuck CTA?
    KOSMOS_HIPSRC=$d HANG_DEFS=-DKOSMOS_DBG_TRACE ITERS=1500 WATCH=6 run "plan $v traced" timeout 120 python3 notes/debug/hang.py both
    break
  fi
done
gpu_tests 1 240
T="-q -p no:cacheprovider --timeout=120 --timeout-method=thread -rfE --color=no"
run "moe backward fused np1" timeout 150 python3 -m mpi4py -m pytest tests/gpu/test_moe_backward_fused.py $T
run "moe backward fused np2" timeout 200 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_backward_fused.py $T
run "bench gemm quick" timeout 300 python3 bench/gemm.py --quick --out "$OUT" --tag next
grep -E "^(no mend|mend)|HANG|no hang|cta [0-9]+:" "$LOG" | head -30
grep -E "geomean|geometric" "$LOG" | tail -6
grep -E "^(FAILED|ERROR) " "$LOG" /tmp/kosmos_gpu_tests_r*.log | sort | uniq | head -20
printf '%s\n' "${summary[@]}"
