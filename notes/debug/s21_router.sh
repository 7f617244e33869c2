#!/usr/bin/env bash
# Session 21: the router's backward inside MoEBackward's launch (issue 13). Mode "tests": the MoE
# layer + fused backward + runtime tests at np 1, the layer's fused/backward tests at np 2 and 4
# (oversubscribed: correctness only). Mode "bench": bench/moe.py --backward at world 1.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s21_router.sh tests|bench|ab
source notes/debug/call_env.sh s21_router_$1
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no -x"
if [ "$1" = tests ]; then
  run "np1 layer+bwd" timeout 280 python3 -m mpi4py -m pytest tests/gpu/test_moe_layer.py \
    tests/gpu/test_moe_backward_fused.py tests/gpu/test_runtime.py $T
  run "np2 layer fused/bwd" timeout 150 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_layer.py \
    -k "fused_is_bitwise or backward_matches or captured or failed_forward" $T
  run "np4 layer fused/bwd" timeout 150 $MPIRUN -np 4 python3 -m mpi4py -m pytest tests/gpu/test_moe_layer.py \
    -k "fused_is_bitwise or backward_matches or failed_forward" $T
elif [ "$1" = ab ]; then
  run "router ab" timeout 300 python3 notes/debug/router_bwd_ab.py --models DeepSeek-V3,Qwen3-30B-A3B --rows 256,2048
  grep -E "^#|rows/exp|ms$" "$LOG"
else
  run "bench bwd" timeout 400 python3 bench/moe.py --backward --models DeepSeek-V3,Llama-4-Scout,Qwen3-30B-A3B \
    --rows 256,2048 --iters 10 --warmup 3 --out "$RUNS" --tag s21
  cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
fi
grep -E "^(FAILED|ERROR) |passed|failed|^E  " "$LOG" | cut -c1-300 | head -30
grep -A40 "# summary" "$LOG" | head -40
printf '%s\n' "${summary[@]}"
