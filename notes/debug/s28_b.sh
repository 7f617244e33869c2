#!/usr/bin/env bash
# Session 28's second device call (<= 7 min): notes/patches/epi_prefetch.patch (branch
# s27-epi-prefetch): the SwiGLU backward epilogue's pre rows prefetched into L2 at each tile's start
# (EpiSwiGLUBackward::prefetch; ncu in session 27 had its loads -- long_scoreboard -- as the
# epilogue's first stall; the quad loads since then made them 16-byte runs but still HBM trips).
# Tree B = main's hipsrc (copied before the patch), interleaved. Apply on top of quad_tails if
# s28_a kept it (the two patches apply in either order).
# Predicted (H100): dgrad2 swiglu 0.220 -> ~0.19 ms at Qwen3-30B 2,048 (B/A ~1.15), DeepSeek-V3
# 3.10 -> ~2.95; fused backward -1..-3 %.
#   KOSMOS_COMMIT=<sha>+epi_prefetch bash notes/debug/s28_b.sh
source notes/debug/call_env.sh s28_b
patch_over_main notes/patches/epi_prefetch.patch grouped.hip moe_fused.hip moe_backward.hip moe_dispatch.hip moe_combine.hip moe_route.hip
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "swiglu bwd tests np1" timeout 120 python3 -m pytest tests/gpu/test_grouped.py tests/gpu/test_gemm.py tests/gpu/test_moe_backward_fused.py -k "swiglu or bitwise or backward" $T
run "parts A/B" timeout 70 python3 bench/moe_gemm_parts.py --rows 256,2048 --tree-b /tmp/tree_main/hipsrc
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 10 --warmup 3 --out $RUNS --tag s28b --tree-b /tmp/tree_main/hipsrc"
run "bench bwd A/B" timeout 90 python3 bench/moe.py --backward $B
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|compiled|^(FAILED|ERROR) |passed|failed|dgrad2|rows/exp|rows/expert|fused|Error|patch" "$LOG" | cut -c1-200 | tail -50
printf '%s\n' "${summary[@]}"
