#!/usr/bin/env bash
# One call on a GPU machine: compile check, GPU tests at world sizes 1-4 (one GPU, oversubscribed),
# the demo, and the mover-loop bench. One log ($OUT/suite.log) plus bench JSON/PNG; a table last.
#   bash bench/device_suite.sh [tests|demo|bench ...]   (default: all)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kosmos_out}; mkdir -p "$OUT"
LOG=$OUT/suite.log
parts=${*:-tests demo bench}
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
summary=()
run() {  # run NAME CMD...: append output to the log, remember the exit code
  local name=$1; shift
  echo "===== $name: $*" >> "$LOG"
  "$@" >> "$LOG" 2>&1
  local rc=$?
  summary+=("$name rc=$rc")
  return $rc
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$LOG"
run "compile sm_90a" python3 -m kosmos.runtime.check --nvidia sm_90a
if [[ $parts == *tests* ]]; then
  for n in ${KOSMOS_NPS:-1 2 3 4}; do
    rm -f /tmp/kosmos_gpu_tests_r*.log
    run "gpu tests np=$n" timeout 420 $MPIRUN -np "$n" bash -c \
      'exec python3 -m mpi4py -m pytest tests/gpu -q -p no:cacheprovider --timeout=180 -rfE --color=no '"${KOSMOS_PYTEST_ARGS:-}"' > /tmp/kosmos_gpu_tests_r$OMPI_COMM_WORLD_RANK.log 2>&1'
    for f in /tmp/kosmos_gpu_tests_r*.log; do
      echo "----- $f (last 40 lines)" >> "$LOG"; tail -n 40 "$f" >> "$LOG"
      summary[-1]+=" | r${f//[^0-9]/}: $(grep -E '[0-9]+ (passed|failed)' "$f" | tail -1)"
    done
  done
fi
if [[ $parts == *demo* ]]; then
  run "demo np=1" timeout 200 python3 -m kosmos.demo --mib 256
  run "demo np=2 (oversubscribed)" timeout 200 $MPIRUN -np 2 python3 -m kosmos.demo --mib 8
fi
if [[ $parts == *bench* ]]; then
  run "bench/collectives" timeout 300 python3 bench/collectives.py --out "$OUT"
fi
echo; grep -A14 -E '^op +impl|^impl +SMs' "$LOG" | head -40
echo; grep -E '^(FAILED|ERROR) ' "$LOG" | sort | uniq | head -20
echo; printf '%s\n' "${summary[@]}"
