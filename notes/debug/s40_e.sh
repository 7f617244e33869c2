#!/usr/bin/env bash
# Session 40 (on branch route-lanes): the launch's routing with four lanes a token (its hipsrc
# change is notes/debug/s40_lanes.patch) against one thread a token (tree B: that patch reversed,
# = 7c7e93c: eight top slots). (1) GPU tests: routing and fused forward at np 1, then (last) at
# np 2 (oversubscribed: correctness only); (2) bench/moe.py forward A/B at the EP-8 share; (3)
# phase traces, forward only, four lanes and one (-D KOSMOS_ROUTE_LANES=1), with the router's real
# E (--ranks 8: Qwen3-30B 128 experts, DeepSeek-V3 256 in 8 groups, 4,096 / 8,192 tokens):
# "router logits summed" -> "tokens routed".
# Predicted (H100): the share's routing round 8 -> ~4 us (Qwen3-30B 256), 24 -> ~8 us (DeepSeek-V3
# 256); at the real E one thread a token ~50 / ~150 us, four lanes ~15 / ~40 us.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s40_e.sh
source notes/debug/call_env.sh s40_e
patch_under_tree notes/debug/s40_lanes.patch moe_fused_forward.hip
run "warm rest" timeout 200 python3 -m kosmos.runtime.warm --jobs 9 moe_route.hip grouped.hip gemm.hip \
  moe_dispatch.hip moe_combine.hip records.hip timing.hip moe_backward.hip moe_fused_backward_f32.hip
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "moe route/forward np1" timeout 120 python3 -m pytest tests/gpu/test_moe_route.py tests/gpu/test_moe_forward.py $T
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 15 --warmup 3 --tree-b /tmp/tree_main/hipsrc --out $RUNS"
run "moe fwd A/B" timeout 100 python3 bench/moe.py $B --tag s40e
cp "$RUNS"/moe*.json "$OUT"/ 2>/dev/null
for m in Qwen3-30B-A3B DeepSeek-V3; do
  for lanes in 4 1; do  # (kRouteLanes 1: one thread a token, = tree B)
    run "phases $m 256 ranks 8 lanes $lanes" timeout 60 python3 notes/debug/phases.py --model $m --rows 256 --movers 0 \
      --ranks 8 --forward-only -D KOSMOS_ROUTE_LANES=$lanes
  done
done
run "moe route/forward np2" timeout 60 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_route.py \
  tests/gpu/test_moe_forward.py $T
grep -E "^=====|passed|failed|^(FAILED|ERROR) |rows/exp|fused|logits summed|tokens routed|routed \+|plan placed|builder call|combine done|tokens,|Error" "$LOG" \
  | cut -c1-200 | tail -60
printf '%s\n' "${summary[@]}"
