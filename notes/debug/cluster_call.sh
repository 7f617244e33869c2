#!/usr/bin/env bash
# 2-CTA clusters in the standalone GEMM, one device call (~6 min):
#   KOSMOS_COMMIT=<sha> bash notes/debug/cluster_call.sh
# 1. the cluster tests first (a hang is bounded by --timeout); 2. the whole GEMM test file;
# 3. bench/gemm.py --set both --quick (ours auto / w128 / w256 / sk / c2 against cuBLAS, interleaved).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KOSMOS_WAIT_BUDGET_S=10
export KOSMOS_COMMIT=${KOSMOS_COMMIT:-unknown}
OUT=${OUT:-/tmp/kosmos_cluster}; mkdir -p "$OUT"; LOG=$OUT/cluster.log
RUNS=/tmp/kosmos_cluster_runs; mkdir -p $RUNS
MPIRUN=true
source bench/suite_lib.sh
T="-q -p no:cacheprovider --timeout=120 --timeout-method=thread -rfE --color=no"
run "cluster tests" timeout 200 python3 -m pytest tests/gpu/test_gemm.py -k "cluster" $T -x
run "gemm tests" timeout 300 python3 -m pytest tests/gpu/test_gemm.py $T
run "bench quick" timeout 400 python3 bench/gemm.py --set both --quick --reps ${REPS:-20} --caps 132 --out "$RUNS" ${BENCH_ARGS:-}
cp $RUNS/*.json "$OUT"/ 2>/dev/null
grep -E "^(FAILED|ERROR) |passed|failed|Error|error:" "$LOG" | head -20
sed -n '/^===== bench/,$p' "$LOG" | cut -c1-260
printf '%s\n' "${summary[@]}"
