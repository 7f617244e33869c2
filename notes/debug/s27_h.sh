#!/usr/bin/env bash
# Session 27, call 8 (<= 6 min): the SwiGLU epilogues' global accesses as 16-byte runs (EpiSwiGLU and
# EpiSwiGLUBackward quad(): four n8 blocks of two rows at a time, quad_transpose across the 4 lanes
# of a quad, one uint4 a lane; before, u32 accesses left half of each sector a request and ncu
# showed 50 % excess sectors and lg_throttle). Tree B = main's HEAD (build/old_tree, carried).
# Predicted (H100, Qwen3-30B 2,048): fwd1 keep 0.426 -> ~0.35 ms, dgrad2 swiglu 0.335 -> ~0.25;
# fused forward -0.04..-0.07 ms, fused backward -0.05..-0.1 ms.
#   KOSMOS_COMMIT=<sha>+quad bash notes/debug/s27_h.sh
source notes/debug/call_env.sh s27_h
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
TB=$PWD/build/old_tree/hipsrc
KOSMOS_HIPSRC=$TB timeout 200 python3 -m kosmos.runtime.warm --jobs 4 moe_fused.hip moe_backward.hip grouped.hip gemm.hip > "$OUT/warm_b.log" 2>&1 &
warm_b=$!
run "warm A" timeout 200 python3 -m kosmos.runtime.warm --jobs 10
wait $warm_b
cat "$OUT/warm_b.log" >> "$LOG"
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "swiglu tests np1" timeout 120 python3 -m pytest tests/gpu/test_gemm.py tests/gpu/test_grouped.py tests/gpu/test_moe_forward.py tests/gpu/test_moe_backward_fused.py -k "swiglu or bitwise or forward or backward" $T
run "parts A/B" timeout 60 python3 bench/moe_gemm_parts.py --rows 2048 --tree-b $TB
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 2048 --iters 10 --warmup 3 --out $RUNS --tag s27h --tree-b $TB"
run "bench fwd A/B" timeout 60 python3 bench/moe.py $B
run "bench bwd A/B" timeout 70 python3 bench/moe.py --backward $B
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|compiled|^(FAILED|ERROR) |passed|failed|rows/exp|rows/expert|swiglu|keep|fused|Error" "$LOG" | cut -c1-200 | tail -60
printf '%s\n' "${summary[@]}"
