#!/usr/bin/env bash
# Session 28's first device call (<= 8 min): notes/patches/quad_tails.patch (branch s27-quad-tails):
# the grouped GEMMs' and the fused MoE's GEMM2 / dgrad1 register-path stores -- every group's last
# row tile when its rows end inside the group, so with routed counts one tile row per expert -- as
# 16-byte runs (EpiQuad: four n8 blocks of two rows, quad_transpose), as session 27 did for the
# SwiGLU epilogues (1.4-1.5x there).
# Tree B = main's hipsrc (copied before the patch), interleaved through bench/grouped_gemm.py
# --tree-b. Balanced routing at 256 / 2,048 rows has no tails (control: B/A ~1.00); skewed has one
# a group. Predicted (H100): skewed 256 rows B/A 1.03-1.08, 2,048 rows 1.00-1.02; fused forward and
# backward at 256 rows -1..-3 %, at 2,048 within 1 %.
#   KOSMOS_COMMIT=<sha>+quad_tails bash notes/debug/s28_a.sh
source notes/debug/call_env.sh s28_a
patch_over_main notes/patches/quad_tails.patch grouped.hip gemm.hip moe_fused.hip moe_backward.hip moe_dispatch.hip moe_combine.hip
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "grouped + MoE tests np1" timeout 170 python3 -m pytest tests/gpu/test_grouped.py tests/gpu/test_moe_layer.py tests/gpu/test_moe_forward.py tests/gpu/test_moe_backward_fused.py $T
run "grouped A/B" timeout 150 python3 bench/grouped_gemm.py --quick --iters 15 --tree-b /tmp/tree_main/hipsrc --out $RUNS
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 10 --warmup 3 --out $RUNS --tag s28a --tree-b /tmp/tree_main/hipsrc"
run "bench fwd A/B" timeout 90 python3 bench/moe.py $B
run "bench bwd A/B" timeout 90 python3 bench/moe.py --backward $B
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|compiled|^(FAILED|ERROR) |passed|failed|B/A|rows/exp|fused|Error|patch" "$LOG" | cut -c1-200 | tail -60
printf '%s\n' "${summary[@]}"
