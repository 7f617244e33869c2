#!/usr/bin/env bash
# Session 39 (for the next call): the fold with two of a token's rows in flight at once
# (notes/patches/fold_two_rows.patch, branch fold-two-rows: combine_fold<4, 2> in the fused
# forward and backward, the standalone combine unchanged at 1 x 1; same sum order, so the fused
# kernels' bits must not move). Tree B = main (patch_over_main). (1) GPU tests: the fused forward,
# backward and layer at np 1, the forward at np 2 (oversubscribed: correctness only); (2)
# bench/moe.py forward and backward, A/B interleaved (--tree-b); (3) the phase trace at 2,048 rows.
# Predicted (H100): the fold ~80 -> ~50 us at Qwen3-30B 2,048 (one row's 2 KB per warp in flight
# -> two rows'), DeepSeek-V3 2,048 ~0.5 -> ~0.35 ms; fused forward -30 us / -0.15 ms there, 256
# rows -5..-8 us; the backward's fold of dX alike.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s39_f.sh
source notes/debug/call_env.sh s39_f
patch_over_main notes/patches/fold_two_rows.patch moe_fused_forward.hip moe_fused_backward_f32.hip moe_fused_backward_bf16.hip moe_combine.hip
TB=/tmp/tree_main/hipsrc
run "warm rest" timeout 200 python3 -m kosmos.runtime.warm --jobs 7 grouped.hip gemm.hip moe_dispatch.hip records.hip timing.hip moe_route.hip moe_backward.hip
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "moe forward/backward/layer np1" timeout 300 python3 -m pytest tests/gpu/test_moe_forward.py tests/gpu/test_moe_backward_fused.py tests/gpu/test_moe_layer.py $T
run "moe forward np2" timeout 200 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_forward.py $T
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 15 --warmup 3 --tree-b $TB --out $RUNS"
run "moe fwd A/B" timeout 200 python3 bench/moe.py $B --tag s39f
run "moe bwd A/B" timeout 200 python3 bench/moe.py --backward ${B/256,2048/2048} --tag s39f_bwd
cp "$RUNS"/moe*.json "$OUT"/ 2>/dev/null
phase_traces "Qwen3-30B-A3B 2048"
grep -E "^=====|passed|failed|^(FAILED|ERROR) |rows/exp|fused|B |combine|builder call done|Error" "$LOG" | cut -c1-220 | tail -60
printf '%s\n' "${summary[@]}"
