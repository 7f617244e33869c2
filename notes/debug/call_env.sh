# Sourced first by the device-call scripts here (`source notes/debug/call_env.sh NAME`): the
# environment, $OUT (the device tool's, or /tmp/kosmos_NAME), $LOG = $OUT/NAME.log, $RUNS (bench
# JSON + PNG; only the JSON is copied to $OUT, whose file count is limited), $MPIRUN (oversubscribed
# ranks on one GPU: correctness only) and bench/suite_lib.sh's run helpers.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KOSMOS_WAIT_BUDGET_S=10
export KOSMOS_COMMIT=${KOSMOS_COMMIT:-unknown}
OUT=${OUT:-/tmp/kosmos_$1}; mkdir -p "$OUT"; LOG=$OUT/$1.log
RUNS=/tmp/kosmos_$1_runs; mkdir -p "$RUNS"
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none -x KOSMOS_COMMIT -x PYTHONPATH -x PYTHONUNBUFFERED -x KOSMOS_WAIT_BUDGET_S"
source bench/suite_lib.sh
