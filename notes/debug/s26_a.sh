#!/usr/bin/env bash
# For session 26's first device call (<= 9 min): notes/patches/forward_own_in_place.patch (the
# forward's combine leaves a rank's own rows in place too; the router's backward reads them in the
# experts' outputs through the combine's own_runs), applied to the device's copy of the tree:
# its tests at np 1, 2, 4 (oversubscribed: correctness only), then bench/moe.py forward and
# backward against the tree before it (build/old_tree: main's kosmos, hipsrc, bench, carried;
# make it with `git archive HEAD kosmos hipsrc bench | tar -x -C build/old_tree` and drop its
# bench/results), each run against its own device path.
#   KOSMOS_COMMIT=<sha>+forward_own_in_place bash notes/debug/s26_a.sh
source notes/debug/call_env.sh s26_a
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
git apply notes/patches/forward_own_in_place.patch >> "$LOG" 2>&1 || { echo "patch does not apply" | tee -a "$LOG"; exit 1; }
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no"
run "combine np1" timeout 60 python3 -m pytest tests/gpu/test_moe_combine.py $T
run "layer np1" timeout 200 python3 -m pytest tests/gpu/test_moe_layer.py tests/gpu/test_moe_forward.py $T
run "bwd fused np1" timeout 120 python3 -m pytest tests/gpu/test_moe_backward_fused.py -k "router or bitwise" $T
for n in 2 4; do
  run "combine+layer np$n" timeout 90 $MPIRUN -np $n python3 -m mpi4py -m pytest tests/gpu/test_moe_combine.py \
    tests/gpu/test_moe_layer.py -k "combine or fused_is_bitwise or backward_matches" $T
done
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 2048 --iters 10 --warmup 3 --out $RUNS --tag s26"
run "bench fwd new" timeout 90 python3 bench/moe.py $B
run "bench bwd new" timeout 90 python3 bench/moe.py --backward $B
run "bench fwd old" bash -c "cd build/old_tree && PYTHONPATH=\$PWD timeout 90 python3 bench/moe.py $B"
run "bench bwd old" bash -c "cd build/old_tree && PYTHONPATH=\$PWD timeout 90 python3 bench/moe.py --backward $B"
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|^(FAILED|ERROR) |passed|failed|rows/exp|fused|unheld|Error|patch|H100|H200" "$LOG" | cut -c1-240 | tail -60
printf '%s\n' "${summary[@]}"
