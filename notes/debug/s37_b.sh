#!/usr/bin/env bash
# Session 37: the fused TP kernels' 128-wide tile as ping-pong (notes/patches/tp_pingpong.patch, over
# pingpong128.patch; on sm_90a the AG kernels spill 212-220 B (stores) / 384-392 B (loads) against
# the cooperative tile's 204-212 / 228-236, the RS and AG+NN(+NT) kernels nothing). Tree A = pp128 + tp ping-pong, tree B = pp128 alone (/tmp/tree_b).
# test_tp at world 1 (its every-width test forces 128) and at np 2 (oversubscribed: correctness only),
# then bench/tp.py --quick with every GEMM forced to 128 x 128, A/B interleaved (world 1: the builder's
# share; B/A > 1 = ping-pong faster).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s37_b.sh
source notes/debug/call_env.sh s37_b
apply_pingpong notes/patches/pingpong128.patch
rm -rf /tmp/tree_b && mkdir -p /tmp/tree_b && cp -r hipsrc /tmp/tree_b/
git apply notes/patches/tp_pingpong.patch >> "$LOG" 2>&1 || { echo "tp_pingpong.patch does not apply" | tee -a "$LOG"; exit 1; }
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no -x"
KOSMOS_HIPSRC=/tmp/tree_b/hipsrc timeout 200 python3 -m kosmos.runtime.warm --jobs 2 tp.hip gemm.hip > "$OUT/warm_b.log" 2>&1 &
run "warm A" timeout 200 python3 -m kosmos.runtime.warm --jobs 2 tp.hip gemm.hip
wait
run "tp np1" timeout -s INT 100 python3 -m pytest tests/gpu/test_tp.py $T
run "tp np2" timeout -s INT 120 $MPIRUN -np 2 python3 -m pytest tests/gpu/test_tp.py -k "width or switches or back_to_back" $T
run "tp A/B at 128" timeout 200 python3 bench/tp.py --quick --tile-n 128 --iters 20 --tree-b /tmp/tree_b/hipsrc --out $RUNS
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
# 9bfe395's question (from s36_d.sh): does backward(out=) now cost no more host time than without?
run "host" timeout 35 python3 notes/debug/host_profile.py --calls 120 --only "fused forward"
grep -E "^=====|passed|failed|FAILED|Error|B/A|does not apply|^  MoELayer" "$LOG" | cut -c1-250 | tail -40
printf '%s\n' "${summary[@]}"
