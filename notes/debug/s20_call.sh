#!/usr/bin/env bash
# Session 20: the shared MLP's backward as jobs of MoEBackward (issue 13); the router's unfused
# products (the np 4 aux-loss ulp).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s20_call.sh A|B
# A: the fused backward + layer tests at np 1, the routing test at np 2 and 4 (oversubscribed:
#    correctness only), bench/moe.py --backward (world 1).
# B: the fused backward + layer tests at np 2, the fused backward's shared-MLP test at np 4
#    (oversubscribed: correctness only).
source notes/debug/call_env.sh s20
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
ROUTE="tests/gpu/test_moe_forward.py -k routing_in_the_launch_is_route_bitwise"
if [[ ${1:-A} == A ]]; then
  run "moe bwd tests np1" timeout 300 python3 -m mpi4py -m pytest tests/gpu/test_runtime.py tests/gpu/test_moe_backward_fused.py tests/gpu/test_moe_layer.py $T
  run "route np4" timeout 200 $MPIRUN -np 4 python3 -m mpi4py -m pytest $ROUTE $T
  run "route np1" timeout 120 python3 -m mpi4py -m pytest $ROUTE $T
  run "bench bwd" timeout 300 python3 bench/moe.py --backward --models DeepSeek-V3,Llama-4-Scout --rows 256,2048 --iters 10 --warmup 3 --out "$RUNS" --tag s20
else
  run "moe bwd tests np2" timeout 330 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_backward_fused.py tests/gpu/test_moe_layer.py $T
  run "shared bwd np4" timeout 180 $MPIRUN -np 4 python3 -m mpi4py -m pytest tests/gpu/test_moe_backward_fused.py -k "shared or refuses" $T
fi
cp $RUNS/*.json "$OUT"/ 2>/dev/null
grep -E "routed backward|fused backward|unheld|backward" "$LOG" | grep -v "^=====" | cut -c1-250 | tail -14
grep -E "^(FAILED|ERROR) |passed|failed" "$LOG" | cut -c1-400 | head -30
printf '%s\n' "${summary[@]}"
