#!/usr/bin/env bash
# Session 27's first device call (<= 9 min): session 26's last call (s26_h) again, the kernel cache warmed first
# (s26_h's tests and benches all ran out of time compiling moe_fused.hip, >100 s of NVRTC on a
# fresh H100 host). notes/patches/side_prefetch.patch: the MoE side pushes prefetch an item's
# source rows into L2 (dispatch.h warp_copy_item; s26_g's trace had them at ~0.35 TB/s pacing
# GEMM1 and dgrad2 at Qwen3-30B), the router's d w takes a token's pairs eight at a time
# (router_grads.h; the backward's phase 0 at ~1.1-1.6 TB/s) and the fold prefetches its rows'
# segments into L2 (combine.h; 0.56 ms at DeepSeek-V3 2,048, 87 us at Qwen3-30B). Main's hipsrc is copied to
# /tmp/tree_main (tree B) first; both trees compile at once (kosmos.runtime.warm), then the fused
# forward's and backward's bitwise tests at np 1 and the forward's at np 2 (oversubscribed:
# correctness only), then bench/moe.py forward and --backward with --tree-b (B = main's kernels,
# interleaved in one run). Predicted (H100): Qwen3-30B 2,048 forward -0.05..-0.1 ms (0.83), backward
# -0.2..-0.3 ms (1.46); DeepSeek-V3 2,048 backward -0.3..-0.5 ms (phase 0: 651 us), forward -0.1..-0.2 (fold).
#   KOSMOS_COMMIT=<sha>+side_prefetch bash notes/debug/s27_a.sh
source notes/debug/call_env.sh s27_a
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
rm -rf /tmp/tree_main && mkdir -p /tmp/tree_main && cp -r hipsrc /tmp/tree_main/
git apply notes/patches/side_prefetch.patch >> "$LOG" 2>&1 || { echo "patch does not apply" | tee -a "$LOG"; exit 1; }
KOSMOS_HIPSRC=/tmp/tree_main/hipsrc timeout 240 python3 -m kosmos.runtime.warm --jobs 5 moe_fused.hip moe_backward.hip moe_dispatch.hip moe_combine.hip moe_route.hip > "$OUT/warm_b.log" 2>&1 &
warm_b=$!
run "warm A" timeout 240 python3 -m kosmos.runtime.warm --jobs 11 moe_fused.hip moe_backward.hip moe_dispatch.hip moe_combine.hip moe_route.hip grouped.hip gemm.hip symmetric.hip collectives.hip timing.hip records.hip
wait $warm_b
cat "$OUT/warm_b.log" >> "$LOG"
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "fused bitwise np1" timeout 170 python3 -m pytest tests/gpu/test_moe_combine.py tests/gpu/test_moe_forward.py tests/gpu/test_moe_backward_fused.py -k "bitwise or combine" $T
run "fwd bitwise np2" timeout 60 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_forward.py -k bitwise $T
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 10 --warmup 3 --out $RUNS --tag s27 --tree-b /tmp/tree_main/hipsrc"
run "bench fwd A/B" timeout 100 python3 bench/moe.py $B
run "bench bwd A/B" timeout 100 python3 bench/moe.py --backward $B
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|^(ok|FAIL) |compiled|^(FAILED|ERROR) |passed|failed|rows/exp|fused|Error|patch" "$LOG" | cut -c1-240 | tail -50
printf '%s\n' "${summary[@]}"
