#!/usr/bin/env bash
# Session 26's last device call (<= 7 min): the MoE side pushes with their rows looked up and
# prefetched into L2 a warp's width at a time (notes/patches/side_prefetch.patch; dispatch.h
# warp_copy_item). The phase trace (s26_g) had them at ~0.35 TB/s, pacing GEMM1 (forward) and
# dgrad2 (backward) at Qwen3-30B. With it, the router's d w (router_grads.h pair_weight_grad, the
# backward's phase 0: ~1.1-1.6 TB/s) keeps two steps of loads in flight instead of one. Applied
# to the device's copy of the tree; main's hipsrc copied
# first to /tmp/tree_main as tree B. The fused forward's and backward's bitwise tests at np 1
# (side pushes on at movers 0; small rows take several warp-widths an item) and the forward's at
# np 2 (oversubscribed: correctness only), then bench/moe.py forward and --backward with
# --tree-b (B = main's kernels, interleaved in one run).
#   KOSMOS_COMMIT=<sha>+side_prefetch bash notes/debug/s26_h.sh
source notes/debug/call_env.sh s26_h
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
rm -rf /tmp/tree_main && mkdir -p /tmp/tree_main && cp -r hipsrc /tmp/tree_main/
git apply notes/patches/side_prefetch.patch >> "$LOG" 2>&1 || { echo "patch does not apply" | tee -a "$LOG"; exit 1; }
T="-q -p no:cacheprovider --timeout=100 --timeout-method=thread -rfE --color=no"
run "fused bitwise np1" timeout 150 python3 -m pytest tests/gpu/test_moe_forward.py tests/gpu/test_moe_backward_fused.py -k bitwise $T
run "fwd bitwise np2" timeout 45 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_forward.py -k bitwise $T
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 10 --warmup 3 --out $RUNS --tag s26 --tree-b /tmp/tree_main/hipsrc"
run "bench fwd A/B" timeout 100 python3 bench/moe.py $B
run "bench bwd A/B" timeout 100 python3 bench/moe.py --backward $B
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|^(FAILED|ERROR) |passed|failed|rows/exp|fused|Error|patch" "$LOG" | cut -c1-240 | tail -40
printf '%s\n' "${summary[@]}"
