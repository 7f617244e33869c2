#!/usr/bin/env bash
# One call on a GPU machine: compile check, GPU tests at world sizes 1-4 (one GPU, oversubscribed),
# the demo, and the mover-loop bench. One log ($OUT/suite.log) plus bench JSON/PNG; a table last.
#   bash bench/device_suite.sh [tests|demo|bench|moe ...]   (default: tests demo bench)
#   moe: the MoE and MXFP8 GPU tests at world sizes 1, 2, 4 (KOSMOS_NPS), the MoE training example at
#        2 ranks, then bench/moe.py --quick
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kosmos_out}; mkdir -p "$OUT"
LOG=$OUT/suite.log
parts=${*:-tests demo bench}
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
source bench/suite_lib.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$LOG"
run "compile sm_90a" python3 -m kosmos.runtime.check --nvidia sm_90a
run "warm the kernel cache" timeout 400 python3 -m kosmos.runtime.warm  # every module, a core each
if [[ $parts == *tests* ]]; then
  for n in ${KOSMOS_NPS:-1 2 3 4}; do gpu_tests "$n" 420; done
fi
if [[ $parts == *demo* ]]; then
  run "demo np=1" timeout 200 python3 -m kosmos.demo --mib 256
  run "demo np=2 (oversubscribed)" timeout 200 $MPIRUN -np 2 python3 -m kosmos.demo --mib 8
fi
if [[ $parts == *moe* ]]; then
  for n in ${KOSMOS_NPS:-1 2 4}; do
    KOSMOS_PYTEST_ARGS="-k 'moe or mx or runs_arrived'" gpu_tests "$n" 300
  done
  run "moe_train np=2 (oversubscribed)" timeout 300 $MPIRUN -np 2 python3 launch/examples/moe_train.py --steps 60
  run "bench/moe quick" timeout 300 python3 bench/moe.py --quick --out "$OUT"
fi
if [[ $parts == *bench* ]]; then
  run "bench/collectives" timeout 300 python3 bench/collectives.py --out "$OUT"
fi
echo; grep -A14 -E '^op +impl|^impl +SMs' "$LOG" | head -40
echo; grep -E '^(FAILED|ERROR) ' "$LOG" | sort | uniq | head -20
echo; printf '%s\n' "${summary[@]}"
