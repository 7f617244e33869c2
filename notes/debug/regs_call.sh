#!/usr/bin/env bash
# Session 11's device call: MoEForward with each register plan (KOSMOS_MOE_FWD_MOVE_REGS: bit 0
# GEMM1 trades registers, bit 1 GEMM2; 4 both GEMMs in one builder call, one trade), each from its own copy of hipsrc (KOSMOS_HIPSRC):
# 600 calls of hang.py (watchdog 6 s) and the forward timed against the device path; then the
# (first) the forward's and the layer's GPU tests at np 1 and 2 on the committed default.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KOSMOS_WAIT_BUDGET_S=10
export KOSMOS_COMMIT=${KOSMOS_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
OUT=${OUT:-/tmp/kosmos_regs}; mkdir -p "$OUT"; LOG=$OUT/regs.log
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none -x KOSMOS_COMMIT -x PYTHONPATH -x PYTHONUNBUFFERED -x KOSMOS_WAIT_BUDGET_S"
source bench/suite_lib.sh
T="-q -p no:cacheprovider --timeout=90 --timeout-method=thread -rfE --color=no"
run "moe fwd+layer np1" timeout 150 python3 -m mpi4py -m pytest tests/gpu/test_moe_forward.py tests/gpu/test_moe_layer.py $T
run "moe fwd+layer np2" timeout 200 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_forward.py tests/gpu/test_moe_layer.py $T
grep -E "passed|failed" "$LOG" | tail -4
for v in ${VARIANTS:-4 0 1 2 3}; do
  d=/tmp/hipsrc_regs$v; rm -rf $d; cp -r hipsrc $d
  sed -i "s/^#define KOSMOS_MOE_FWD_MOVE_REGS .*/#define KOSMOS_MOE_FWD_MOVE_REGS $v/" $d/moe_fused.hip
  KOSMOS_HIPSRC=$d ITERS=${ITERS:-600} WATCH=6 run "regs=$v hang.py" timeout 120 python3 notes/debug/hang.py both
  grep -E "HANG|no hang" "$LOG" | tail -1
  KOSMOS_HIPSRC=$d run "regs=$v bench" timeout 150 python3 bench/moe.py --models Qwen3-30B-A3B,DeepSeek-V3 \
    --rows 256,2048 --iters 10 --out "$OUT" --tag regs$v
  grep -E "rows/exp|fused" "$LOG" | tail -4
done
printf '%s\n' "${summary[@]}"
