#!/usr/bin/env bash
# Session 19: the shared experts' MLP inside the fused forward's launch (issue 12).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s19_call.sh A|B
# A: MoE tests at np 1 (forward incl. the shared MLP in the launch, layer, fused backward, route) and
#    the in-launch / apart / device A/B (notes/debug/shared_ab.py).
# B: the MoE forward and layer tests at np 2 (oversubscribed: correctness only) and bench/moe.py.
source notes/debug/call_env.sh s19
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
TESTS="tests/gpu/test_moe_forward.py tests/gpu/test_moe_layer.py"
if [[ ${1:-A} == A ]]; then
  run "moe tests np1" timeout 330 python3 -m mpi4py -m pytest $TESTS tests/gpu/test_moe_backward_fused.py tests/gpu/test_moe_route.py $T
  run "shared a/b" timeout 200 python3 notes/debug/shared_ab.py
else
  run "moe tests np2" timeout 330 $MPIRUN -np 2 python3 -m mpi4py -m pytest $TESTS $T
  run "bench fwd" timeout 200 python3 bench/moe.py --models DeepSeek-V3,Llama-4-Scout --rows 256,2048 --iters 10 --warmup 3 --out "$RUNS" --tag s19
fi
cp $RUNS/*.json "$OUT"/ 2>/dev/null
sed -n '/^===== shared/,$p' "$LOG" | head -12
grep -E "^=====|rows/exp|fused" "$LOG" | grep -v "^===== shared" | cut -c1-300 | tail -12
grep -E "^(FAILED|ERROR) |passed|failed" "$LOG" | head -30
printf '%s\n' "${summary[@]}"
