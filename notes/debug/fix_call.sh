#!/usr/bin/env bash
# Session 11's second device call: the builder's barrier-4 mend (consumers arrive after their
# .inc<232>, the producer syncs before its .inc<168>) under the register plans that hung (2, 3) and
# the default (4: one trade for both GEMMs), 1,000 hang.py calls each; the whole GPU suite at np 1;
# the MoE forward/layer tests at np 2; the forward timed against the device path.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KOSMOS_WAIT_BUDGET_S=10 KOSMOS_PYTEST_ARGS=--timeout-method=thread
export KOSMOS_COMMIT=${KOSMOS_COMMIT:-unknown}
OUT=${OUT:-/tmp/kosmos_fix}; mkdir -p "$OUT"; LOG=$OUT/fix.log
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none -x KOSMOS_COMMIT -x PYTHONPATH -x PYTHONUNBUFFERED -x KOSMOS_WAIT_BUDGET_S"
source bench/suite_lib.sh
for v in 2 3 4; do
  d=/tmp/hipsrc_regs$v; rm -rf $d; cp -r hipsrc $d
  sed -i "s/^#define KOSMOS_MOE_FWD_MOVE_REGS .*/#define KOSMOS_MOE_FWD_MOVE_REGS $v/" $d/moe_fused.hip
  KOSMOS_HIPSRC=$d ITERS=1000 WATCH=6 run "regs=$v hang.py x1000" timeout 100 python3 notes/debug/hang.py both
  grep -E "HANG|no hang" "$LOG" | tail -1
done
gpu_tests 1 220
T="-q -p no:cacheprovider --timeout=90 --timeout-method=thread -rfE --color=no"
run "moe fwd+layer np2" timeout 120 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_forward.py tests/gpu/test_moe_layer.py $T
run "bench moe" timeout 120 python3 bench/moe.py --models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 10 --out "$OUT" --tag fix
grep -E "rows/exp|fused m=" "$LOG" | tail -8
grep -E "^(FAILED|ERROR) " "$LOG" /tmp/kosmos_gpu_tests_r*.log | sort | uniq | head -20
printf '%s\n' "${summary[@]}"
