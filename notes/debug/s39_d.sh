#!/usr/bin/env bash
# Session 39: SwiGLU on the 128-wide ping-pong tile in the grouped GEMM (kosmos_grouped_tn_swiglu_n128;
# the chooser takes it where 256-wide tiles leave less than whole waves). (1) tests/gpu/test_grouped.py
# (the new tile bitwise the dense 256-wide SwiGLU GEMM) and test_moe_layer.py (its device path runs
# the grouped SwiGLU with the automatic width); (2) notes/debug/swiglu_width_ab.py: 256 vs 128 forced,
# interleaved, one tree; (3) bench/moe.py Qwen3-30B (its "experts" now with the chooser's width).
# Predicted: Qwen3-30B 256 rows GEMM1 61 -> ~50 us (192 tiles = 1.45 waves of 256 -> 384 = 2.9 of 128).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s39_d.sh
source notes/debug/call_env.sh s39_d
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 3 grouped.hip gemm.hip moe_fused.hip
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "grouped + moe layer tests" timeout 300 python3 -m pytest tests/gpu/test_grouped.py tests/gpu/test_moe_layer.py $T
run "swiglu width A/B" timeout 200 python3 notes/debug/swiglu_width_ab.py --iters 30
run "moe fwd" timeout 120 python3 bench/moe.py --models Qwen3-30B-A3B,DeepSeek-V3 --rows 256 --iters 15 --warmup 3 --out $RUNS --tag s39d
cp "$RUNS"/moe*.json "$OUT"/ 2>/dev/null
grep -E "^=====|passed|failed|^(FAILED|ERROR) |rows/exp|fused|balanced|skewed|bitwise|Error" "$LOG" | cut -c1-220 | tail -60
printf '%s\n' "${summary[@]}"
