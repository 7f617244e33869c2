#!/usr/bin/env bash
# One call on a GPU machine: compile check, GPU tests at world sizes 1-4 (one GPU, oversubscribed),
# the demo, and the mover-loop bench. Logs under $OUT (default /tmp/kosmos_out); a table last.
#   bash bench/device_suite.sh [tests|demo|bench ...]   (default: all)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kosmos_out}; mkdir -p "$OUT"
parts=${*:-tests demo bench}
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none --tag-output"
summary=()
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
python3 -m kosmos.runtime.check --nvidia sm_90a > "$OUT/compile.log" 2>&1; summary+=("compile sm_90a rc=$?")
if [[ $parts == *tests* ]]; then
  for n in ${KOSMOS_NPS:-1 2 3 4}; do
    timeout 420 $MPIRUN -np "$n" python3 -m mpi4py -m pytest tests/gpu -q -p no:cacheprovider --timeout=180 \
      ${KOSMOS_PYTEST_ARGS:-} > "$OUT/gpu_tests_np$n.log" 2>&1
    rc=$?
    summary+=("gpu tests np=$n rc=$rc: $(grep -E '^\[1,0\]<stdout>:.*(passed|failed|error)' "$OUT/gpu_tests_np$n.log" | tail -1 | sed 's/^\[1,0\]<stdout>://')")
  done
fi
if [[ $parts == *demo* ]]; then
  timeout 200 python3 -m kosmos.demo --mib 256 > "$OUT/demo_np1.log" 2>&1; summary+=("demo np=1 rc=$?")
  timeout 200 $MPIRUN -np 2 python3 -m kosmos.demo --mib 8 > "$OUT/demo_np2.log" 2>&1; summary+=("demo np=2 (oversubscribed) rc=$?")
fi
if [[ $parts == *bench* ]]; then
  timeout 300 python3 bench/collectives.py --out "$OUT" > "$OUT/bench_collectives.log" 2>&1; summary+=("bench/collectives rc=$?")
fi
echo; for f in "$OUT"/demo_np1.log "$OUT"/bench_collectives.log; do [ -f "$f" ] && tail -n 16 "$f"; done
echo; printf '%s\n' "${summary[@]}"
