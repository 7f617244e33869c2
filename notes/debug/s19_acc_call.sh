#!/usr/bin/env bash
# Session 19: kosmos.matmul(epilogue="accumulate") (GPU tests, A/B against out += matmul) and the MoE
# layer's shared-MLP backward on it (MoE tests np 1, bench/moe.py --backward at DeepSeek-V3).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s19_acc_call.sh
source notes/debug/call_env.sh s19f
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "gemm tests" timeout 200 python3 -m mpi4py -m pytest tests/gpu/test_gemm.py $T
run "moe tests np1" timeout 300 python3 -m mpi4py -m pytest tests/gpu/test_moe_forward.py tests/gpu/test_moe_layer.py tests/gpu/test_moe_backward_fused.py $T
run "accumulate a/b" timeout 120 python3 notes/debug/accumulate_ab.py
run "bench bwd" timeout 250 python3 bench/moe.py --backward --models DeepSeek-V3 --rows 256,2048 --iters 10 --warmup 3 --out "$RUNS" --tag s19_acc
cp $RUNS/*.json "$OUT"/ 2>/dev/null
sed -n '/^===== accumulate/,/^===== bench/p' "$LOG"
grep -E "routed backward|fused backward|unheld" "$LOG"
grep -E "^(FAILED|ERROR) |passed|failed" "$LOG" | head -30
printf '%s\n' "${summary[@]}"
