#!/usr/bin/env bash
# Session 26's first device call (<= 9.5 min): both session-25 patches at once on the device's copy
# of the tree (notes/patches/forward_own_in_place.patch, then wgrad_turns.patch; a copy of hipsrc
# with only the first goes to /tmp/tree_fwd). The whole tests/gpu at np 1 (also the first GPU run of
# main's b51e285 epilogue fix, f531b03 launch_buffers and 6e74092 combine push), the MoE combine /
# layer / fused backward's bitwise tests at np 2 and 4 (oversubscribed: correctness only), then the
# forward A/B: bench/moe.py with --tree-b /tmp/tree_fwd/hipsrc (the "B" twins lack the wgrad turns:
# their effect on the forward) and main's tree (build/old_tree, carried; `git archive HEAD kosmos
# hipsrc bench | tar -x -C build/old_tree`, drop its bench/results).
#   KOSMOS_COMMIT=<sha>+fwd_own+wgrad_turns bash notes/debug/s26_d.sh
source notes/debug/call_env.sh s26_d
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
git apply notes/patches/forward_own_in_place.patch >> "$LOG" 2>&1 || { echo "forward patch does not apply" | tee -a "$LOG"; exit 1; }
rm -rf /tmp/tree_fwd && mkdir -p /tmp/tree_fwd && cp -r hipsrc /tmp/tree_fwd/
git apply notes/patches/wgrad_turns.patch >> "$LOG" 2>&1 || { echo "wgrad patch does not apply" | tee -a "$LOG"; exit 1; }
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no"
run "gpu np1" timeout 270 python3 -m pytest tests/gpu $T
for n in 2 4; do
  run "moe np$n" timeout 60 $MPIRUN -np $n python3 -m mpi4py -m pytest tests/gpu/test_moe_combine.py \
    tests/gpu/test_moe_layer.py tests/gpu/test_moe_backward_fused.py -k "combine or fused_is_bitwise or backward_matches or bitwise or router" $T
done
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 2048 --iters 10 --warmup 3 --out $RUNS --tag s26"
run "bench fwd new, B = no turns" timeout 90 python3 bench/moe.py $B --tree-b /tmp/tree_fwd/hipsrc
run "bench fwd old" bash -c "cd build/old_tree && PYTHONPATH=\$PWD timeout 70 python3 bench/moe.py $B"
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|^(FAILED|ERROR) |passed|failed|rows/exp|fused|unheld|Error|patch|H100|H200" "$LOG" | cut -c1-240 | tail -60
printf '%s\n' "${summary[@]}"
