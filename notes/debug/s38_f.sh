#!/usr/bin/env bash
# The launch's routing a warp a token over every CTA (notes/patches/route_warp_grid.patch, branch
# route-warp-grid; built in session 38, CPU-tested, NOT yet run on a GPU). (1) bench/moe.py forward
# on main; (2) the patch applied: the routing, forward and layer GPU tests at np 1 (the fused path
# bitwise the device path: the warp form must give the one-thread form's bits), the forward's at
# np 2 (oversubscribed: correctness only); (3) the bench with the patch, then main's again (not
# interleaved: the patch adds a RouteParams field, so --tree-b's shared Python side cannot drive
# main's kernels); (4) the phase trace.
# Predicted (H100): "tokens routed" - "router logits summed" 16 -> ~3 us (Qwen3-30B), 38 -> ~5
# (DeepSeek-V3 256), plus one grid barrier (~2.4 us); fused forward -10 us (Qwen3-30B), -30 us
# (DeepSeek-V3 256). Keep it if the tests pass and the bench gains; else the patch stays a record.
#   KOSMOS_COMMIT=<sha>+route_warp_grid bash notes/debug/s38_f.sh
source notes/debug/call_env.sh s38_f
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 15 --warmup 3 --out $RUNS"
rm -rf /tmp/main_tree && mkdir -p /tmp/main_tree && cp -r kosmos hipsrc bench /tmp/main_tree/
run "warm main" timeout 200 python3 -m kosmos.runtime.warm --jobs 8 moe_fused.hip moe_route.hip moe_backward.hip grouped.hip gemm.hip moe_dispatch.hip moe_combine.hip records.hip timing.hip
run "moe fwd main" timeout 150 python3 bench/moe.py $B --tag s38f_main
git apply notes/patches/route_warp_grid.patch >> "$LOG" 2>&1 || { echo "patch does not apply" | tee -a "$LOG"; exit 1; }
run "warm patch" timeout 200 python3 -m kosmos.runtime.warm --jobs 3 moe_fused.hip moe_route.hip moe_backward.hip
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "moe route/forward/layer np1" timeout 280 python3 -m pytest tests/gpu/test_moe_route.py tests/gpu/test_moe_forward.py tests/gpu/test_moe_layer.py $T
run "moe forward np2" timeout 200 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_forward.py $T
run "moe fwd patch" timeout 150 python3 bench/moe.py $B --tag s38f_patch
run "moe fwd main again" timeout 150 env PYTHONPATH=/tmp/main_tree KOSMOS_HIPSRC=/tmp/main_tree/hipsrc \
  python3 /tmp/main_tree/bench/moe.py $B --tag s38f_main2
cp "$RUNS"/moe*.json "$OUT"/ 2>/dev/null
phase_traces "Qwen3-30B-A3B 256" "DeepSeek-V3 256"
grep -E "^=====|passed|failed|^(FAILED|ERROR) |rows/exp|fused|router|routed|plan placed|dispatch part|Error" "$LOG" | grep -v "^backward" | cut -c1-220 | tail -70
printf '%s\n' "${summary[@]}"
