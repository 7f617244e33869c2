# Shared by bench/device_suite.sh and bench/multi_gpu_suite.sh (source it; needs LOG and MPIRUN).
summary=()

run() {  # run NAME CMD...: append output to $LOG, remember the exit code in the summary
  local name=$1; shift
  echo "===== $name: $*" >> "$LOG"
  "$@" >> "$LOG" 2>&1
  local rc=$?
  summary+=("$name rc=$rc")
  return $rc
}

gpu_tests() {  # gpu_tests NP TIMEOUT_S: tests/gpu under mpirun, one log per rank, pass counts in the summary
  local n=$1 limit=$2
  rm -f /tmp/kosmos_gpu_tests_r*.log
  run "gpu tests np=$n" timeout "$limit" $MPIRUN -np "$n" bash -c \
    'exec python3 -m mpi4py -m pytest tests/gpu -q -p no:cacheprovider --timeout=180 -rfE --color=no '"${KOSMOS_PYTEST_ARGS:-}"' > /tmp/kosmos_gpu_tests_r$OMPI_COMM_WORLD_RANK.log 2>&1'
  local f
  for f in /tmp/kosmos_gpu_tests_r*.log; do
    echo "----- $f (last 40 lines)" >> "$LOG"; tail -n 40 "$f" >> "$LOG"
    summary[-1]+=" | r${f//[^0-9]/}: $(grep -E '[0-9]+ (passed|failed|skipped|errors?)\b' "$f" | tail -1)"
  done
}
