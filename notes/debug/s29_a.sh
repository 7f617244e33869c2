#!/usr/bin/env bash
# Session 29's first device call (<= 7 min), three things on one warm machine (s29_c.sh, right after
# it on the same machine, runs the rest of producer_regs' A/B):
# 1. what main has that no GPU ran yet: kosmos/collectives.py _staged_call (tests/gpu/
#    test_collectives.py at np 1 and 2, oversubscribed: correctness only) and config.h's final form
#    (34e1487: the bf16 192 tile's staging 8 KB higher than the tested one; test_gemm / test_mx /
#    test_grouped below, with the patch applied: it leaves the tile layouts alone).
# 2. notes/debug/hbm_pattern.py: what HBM gives the small-M grouped GEMMs' weight-read order
#    (every CTA at the same 128 B of its rows) against a plain stream and a per-CTA rotated order.
#    If rot256 >> lock256, a per-tile rotation of the K loop is worth building (notes/next.md).
# 3. notes/patches/producer_regs.patch: setmaxnreg producer 40 -> 56, consumers 232 -> 224, the
#    MoE side pushes 8 vectors a lane in flight instead of 4. Predicted (H100): Qwen3-30B 2,048
#    forward 0.715 -> ~0.67 ms and backward -3..-6 % (the side pushes pace GEMM1 / phase A there);
#    DeepSeek-V3 forward within +-1 % (GEMM1 outlasts its pushes), backward -0..-6 % (its 0.94 GB
#    of dY pushes at ~0.4 TB/s overlap phase A: 4.6 ms traced against dgrad2's 3.1 alone); TP fused
#    at world 1 and the plain/grouped GEMMs within +-1 % (the consumers' 8 fewer registers: no
#    spill by ptxas in gemm/grouped).
#   KOSMOS_COMMIT=<sha>+producer_regs bash notes/debug/s29_a.sh
source notes/debug/call_env.sh s29_a
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no"
patch_over_main notes/patches/producer_regs.patch grouped.hip tp.hip moe_fused.hip moe_backward.hip moe_dispatch.hip moe_combine.hip moe_route.hip
run "hbm pattern" timeout 60 python3 notes/debug/hbm_pattern.py
run "collectives np1" timeout 90 python3 -m pytest tests/gpu/test_collectives.py $T
run "collectives np2" timeout 90 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_collectives.py $T
run "patch tests np1" timeout 240 python3 -m pytest tests/gpu/test_moe_forward.py tests/gpu/test_moe_backward_fused.py tests/gpu/test_moe_layer.py tests/gpu/test_tp.py tests/gpu/test_grouped.py tests/gpu/test_gemm.py tests/gpu/test_mx.py $T
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 10 --warmup 3 --out $RUNS --tag s29a --tree-b /tmp/tree_main/hipsrc"
run "moe fwd A/B" timeout 100 python3 bench/moe.py $B
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
run "moe bwd A/B" timeout 100 python3 bench/moe.py --backward $B
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|compiled|^(FAILED|ERROR) |passed|failed|B/A|rows/exp|fused|Error|patch|GB/s|MiB" "$LOG" | cut -c1-200 | tail -90
printf '%s\n' "${summary[@]}"
