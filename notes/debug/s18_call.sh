#!/usr/bin/env bash
# Session 18: the routing inside the fused forward's launch (issue 12).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s18_call.sh A|B
# A: MoE tests at np 1 (forward incl. the routing in the launch, layer, fused backward, route), the
#    in-launch / outside / device A/B (notes/debug/routed_ab.py) and the phase timeline.
# B: the MoE forward and layer tests at np 2 (oversubscribed: correctness only) and bench/moe.py.
source notes/debug/call_env.sh s18
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
TESTS="tests/gpu/test_moe_forward.py tests/gpu/test_moe_layer.py"
if [[ ${1:-A} == A ]]; then
  run "moe tests np1" timeout 300 python3 -m mpi4py -m pytest $TESTS tests/gpu/test_moe_backward_fused.py tests/gpu/test_moe_route.py $T
  run "routed a/b" timeout 150 python3 notes/debug/routed_ab.py
  run "phases 2048" timeout 100 python3 notes/debug/phases.py --rows 2048 --movers 0
else
  run "moe tests np2" timeout 330 $MPIRUN -np 2 python3 -m mpi4py -m pytest $TESTS $T
  run "bench fwd" timeout 200 python3 bench/moe.py --models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 10 --warmup 3 --movers auto --out "$RUNS" --tag s18
fi
cp $RUNS/*.json "$OUT"/ 2>/dev/null
sed -n '/^===== routed/,/^===== phases/p' "$LOG" | grep -v "^===== phases"
sed -n '/^===== phases/,$p' "$LOG" | grep -E "^=====|^(forward|backward):|router|routed|placed|dispatch part|job|push done|combine done" | head -30
grep -E "^=====|rows/exp|fused" "$LOG" | grep -v "^===== (phases|routed)" | cut -c1-300 | tail -12
grep -E "^(FAILED|ERROR) |passed|failed" "$LOG" | head -30
printf '%s\n' "${summary[@]}"
