#!/usr/bin/env bash
# Session 29's third device call (<= 8 min), two things:
# 1. main's MXFP8 wgrad as a TN on the column-wise copies stored transposed, with the operand swap
#    (kosmos.gemm.mx_route "swapped": (b a^T)^T where b is much taller, the result transposed by
#    hipsrc/gemm.hip kosmos_gemm_transpose_b16/b32): tests/gpu/test_mx.py, test_tp_mx.py, test_gemm.py,
#    test_grouped.py (gemm.hip gained the transpose kernels), then bench/gemm.py --quick --precision mxfp8 on
#    every layout (TN/NN unchanged: their b is never the taller; NT predicted 0.76 -> ~0.84 geomean:
#    8B-QKV 0.58 -> ~0.78, 70B-QKV 0.70 -> ~0.84, the rest as before).
# 2. producer_regs' second A/B on what the first left open: bench/tp.py --quick at 25 iterations
#    (ag_tn 8B-FC1 0.958, ag_nn 8B-Down 0.938 in s29_c) and the fused backward at 2,048 rows
#    (Qwen3-30B A 2.5 % faster, DeepSeek-V3 0.5 %).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s29_d.sh
source notes/debug/call_env.sh s29_d
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no"
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm gemm mx" timeout 120 python3 -m kosmos.runtime.warm --jobs 4 gemm.hip mx.hip tp.hip
run "tests np1" timeout 200 python3 -m pytest tests/gpu/test_mx.py tests/gpu/test_tp_mx.py tests/gpu/test_gemm.py tests/gpu/test_grouped.py $T
run "gemm mx quick" timeout 200 python3 bench/gemm.py --quick --precision mxfp8 --caps 132 --reps 15 --out $RUNS --tag s29_mx
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
patch_over_main notes/patches/producer_regs.patch grouped.hip tp.hip moe_fused.hip moe_backward.hip moe_dispatch.hip moe_combine.hip moe_route.hip
run "tp A/B" timeout 150 python3 bench/tp.py --quick --iters 25 --tree-b /tmp/tree_main/hipsrc --out $RUNS
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
run "moe bwd A/B" timeout 100 python3 bench/moe.py --backward --models Qwen3-30B-A3B,DeepSeek-V3 --rows 2048 --iters 10 --warmup 3 --out $RUNS --tag s29d --tree-b /tmp/tree_main/hipsrc
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|compiled|^(FAILED|ERROR) |passed|failed|B/A|Error|patch|mxfp8/bf16|fused backward" "$LOG" | cut -c1-230 | tail -80
printf '%s\n' "${summary[@]}"
