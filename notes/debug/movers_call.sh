#!/usr/bin/env bash
# The fused MoE kernels' movers, one device call (~5 min):
#   KOSMOS_COMMIT=<sha> [MOVERS=0,33] [RATE=0] [VARIANTS="name=dir ..."] bash notes/debug/movers_call.sh
# 0. the movers' copy rate alone (bulk_rate.py); 1. correctness of the tree as it is (MoE forward,
# backward, layer tests at np 1 and 2; bitwise the device path); 2. phase timelines for each movers
# count in MOVERS (default 33,66); 3. bench/moe.py forward and backward, for the tree and for
# each variant (another hipsrc directory, carried to the device; separate processes: compare each
# run's fused/device ratio).
source notes/debug/call_env.sh movers
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no -x"
M="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 10 --warmup 3 --movers ${MOVERS:-33,66}"
TESTS="tests/gpu/test_moe_forward.py tests/gpu/test_moe_backward_fused.py tests/gpu/test_moe_layer.py"
[[ ${RATE:-1} == 1 ]] && run "bulk rate" timeout 120 python3 notes/debug/bulk_rate.py
run "tests np1" timeout 150 python3 -m mpi4py -m pytest $TESTS $T
run "tests np2" timeout 200 $MPIRUN -np 2 python3 -m mpi4py -m pytest $TESTS $T
run "phases 2048" timeout 150 python3 notes/debug/phases.py --rows 2048 --movers ${MOVERS:-33,66}
run "fwd tree" timeout 150 python3 bench/moe.py $M --crew 0 --out "$RUNS" --tag fwd_tree
run "bwd tree" timeout 150 python3 bench/moe.py --backward $M --out "$RUNS" --tag bwd_tree
for v in ${VARIANTS:-}; do
  export KOSMOS_HIPSRC=${v#*=}
  run "fwd ${v%%=*}" timeout 150 python3 bench/moe.py $M --crew 0 --out "$RUNS" --tag "fwd_${v%%=*}"
  run "bwd ${v%%=*}" timeout 150 python3 bench/moe.py --backward $M --out "$RUNS" --tag "bwd_${v%%=*}"
  unset KOSMOS_HIPSRC
done
cp $RUNS/*.json "$OUT"/
sed -n '/^===== bulk rate/,/^===== tests np1/p' "$LOG" | grep -v "^===== tests"
sed -n '/^===== phases/,/^===== fwd tree/p' "$LOG" | grep -E "^=====|^(forward|backward):|dispatch part|job|push done|combine done"
grep -E "^=====|rows/exp|fused" "$LOG" | grep -v "^===== phases" | cut -c1-330
grep -E "^(FAILED|ERROR) |passed|failed" "$LOG" | head
printf '%s\n' "${summary[@]}"
