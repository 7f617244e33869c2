#!/usr/bin/env bash
# Session 41's first call: two A/Bs, each deciding a change on main, most important first (the
# call may run out of time: $OUT keeps the log so far).
#  1. eight top slots (notes/debug/s40_topn8.patch: tree A) against sixteen (main: tree B): GPU
#     tests (routing + fused forward np 1; the first GPU run of dfb691c too), forward A/B.
#  2. the prefix changes (notes/debug/s41_prefix.patch = branch plan-scans: the early count publish
#     and the plan's tables by CTA-wide scans; tree A2 = main + topn8 + prefix) against main +
#     topn8 (B2): forward, dispatch and combine tests np 1, forward A/B, phase traces at --ranks 8
#     (the router's real E, where the serial loops were longest).
# s41_b.sh follows on the same machine: the prefix patch's np 2 and backward tests.
# Predicted (H100): (1) route_token 8.2 -> ~5.5 us at Qwen3-30B's share, fused forward -1 %;
# (2) -3 us (the publish's fence) at the share; at --ranks 8 (E 128 / 256) "plan placed ->
# dispatch part done" shorter by several us (P*E serial shared loads and E chained global loads).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s41_a.sh
source notes/debug/call_env.sh s41_a
stamp() { echo "----- $(date +%T) $*" >> "$LOG"; }
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 20 --warmup 3 --tree-b /tmp/tree_main/hipsrc --out $RUNS"
stamp start
patch_over_main notes/debug/s40_topn8.patch moe_fused_forward.hip moe_route.hip
stamp warmed
run "warm rest" timeout 200 python3 -m kosmos.runtime.warm --jobs 6 grouped.hip gemm.hip records.hip timing.hip \
  moe_dispatch.hip moe_combine.hip
run "topn8: moe route/forward np1" timeout 200 python3 -m pytest tests/gpu/test_moe_route.py tests/gpu/test_moe_forward.py $T
stamp tested
run "topn8: moe fwd A/B" timeout 150 python3 bench/moe.py $B --tag s41a_topn8
stamp benched
cp "$RUNS"/moe*.json "$OUT"/ 2>/dev/null
rm -rf /tmp/tree_main && mkdir -p /tmp/tree_main && cp -r hipsrc /tmp/tree_main/
git apply notes/debug/s41_prefix.patch >> "$LOG" 2>&1 || { echo "prefix: no apply" | tee -a "$LOG"; exit 1; }
warm_both_trees moe_fused_forward.hip moe_dispatch.hip moe_combine.hip
stamp warmed2
run "prefix: moe forward/dispatch/combine np1" timeout 150 python3 -m pytest tests/gpu/test_moe_forward.py \
  tests/gpu/test_moe_dispatch.py tests/gpu/test_moe_combine.py $T
stamp tested2
run "prefix: moe fwd A/B" timeout 150 python3 bench/moe.py $B --tag s41a_prefix
stamp benched2
cp "$RUNS"/moe*.json "$OUT"/ 2>/dev/null
for m in Qwen3-30B-A3B DeepSeek-V3; do
  run "phases A2 $m 256 ranks 8" timeout 100 python3 notes/debug/phases.py --model $m --rows 256 --movers 0 --ranks 8 --forward-only
  run "phases B2 $m 256 ranks 8" env KOSMOS_HIPSRC=/tmp/tree_main/hipsrc timeout 100 python3 notes/debug/phases.py --model $m \
    --rows 256 --movers 0 --ranks 8 --forward-only
done
stamp traced
grep -E "^=====|^-----|passed|failed|^(FAILED|ERROR) |rows/exp|fused|router|routed|plan placed|dispatch part|GEMM1|fold|Error" "$LOG" \
  | grep -v "^  job" | cut -c1-200 | tail -80
printf '%s\n' "${summary[@]}"
