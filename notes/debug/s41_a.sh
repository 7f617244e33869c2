#!/usr/bin/env bash
# Session 41's first call, two A/Bs in one (each decides a change on main), then session 40's traces:
#  1. eight top slots (notes/debug/s40_topn8.patch: tree A) against sixteen (main: tree B): GPU
#     tests (routing + fused forward np 1; the first GPU run of dfb691c too), forward A/B.
#  2. the early count publish (notes/debug/s41_early.patch = branch early-counts; tree A2 = main +
#     topn8 + early) against main + topn8 (B2): forward tests np 1 and np 2 (oversubscribed: the
#     publish's cross-rank protocol), forward A/B.
#  3. s40_d's phase traces with s39's marks at --ranks 8 (the router's real E), topn8 / main.
# Predicted (H100): (1) route_token 8.2 -> ~5.5 us at Qwen3-30B's share, fused forward -1 %;
# (2) -3 us (the publish's fence, 3.4 us in s40_c) at Qwen3-30B 256 (-1.5 %), nothing at 2,048.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s41_a.sh
source notes/debug/call_env.sh s41_a
stamp() { echo "----- $(date +%T) $*" >> "$LOG"; }
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 20 --warmup 3 --tree-b /tmp/tree_main/hipsrc --out $RUNS"
stamp start
patch_over_main notes/debug/s40_topn8.patch moe_fused_forward.hip moe_route.hip
stamp warmed
run "warm rest" timeout 200 python3 -m kosmos.runtime.warm --jobs 8 grouped.hip gemm.hip \
  moe_dispatch.hip moe_combine.hip records.hip timing.hip moe_backward.hip moe_fused_backward_f32.hip
run "topn8: moe route/forward np1" timeout 200 python3 -m pytest tests/gpu/test_moe_route.py tests/gpu/test_moe_forward.py $T
stamp tested
run "topn8: moe fwd A/B" timeout 150 python3 bench/moe.py $B --tag s41a_topn8
stamp benched
rm -rf /tmp/tree_main && mkdir -p /tmp/tree_main && cp -r hipsrc /tmp/tree_main/
git apply notes/debug/s41_early.patch >> "$LOG" 2>&1 || { echo "early: no apply" | tee -a "$LOG"; exit 1; }
warm_both_trees moe_fused_forward.hip
run "early: moe forward np1" timeout 150 python3 -m pytest tests/gpu/test_moe_forward.py $T
run "early: moe forward np2" timeout 150 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_forward.py $T
stamp tested2
run "early: moe fwd A/B" timeout 150 python3 bench/moe.py $B --tag s41a_early
stamp benched2
cp "$RUNS"/moe*.json "$OUT"/ 2>/dev/null
# 3. traces: topn8 (this tree less the early patch) against main
git apply -R notes/debug/s41_early.patch >> "$LOG" 2>&1
rm -rf /tmp/tree_main && mkdir -p /tmp/tree_main && cp -r hipsrc /tmp/tree_main/ \
  && (cd /tmp/tree_main && git apply -R "$OLDPWD/notes/debug/s40_topn8.patch") >> "$LOG" 2>&1
git apply notes/debug/s39_e_marks.patch >> "$LOG" 2>&1 || { echo "marks: no apply" | tee -a "$LOG"; exit 1; }
(cd /tmp/tree_main && git apply --include='hipsrc/*' "$OLDPWD/notes/debug/s39_e_marks.patch") >> "$LOG" 2>&1 \
  || { echo "marks B: no apply" | tee -a "$LOG"; exit 1; }
for m in Qwen3-30B-A3B DeepSeek-V3; do
  run "phases A $m 256 ranks 8" timeout 100 python3 notes/debug/phases.py --model $m --rows 256 --movers 0 --ranks 8 --forward-only
  run "phases B $m 256 ranks 8" env KOSMOS_HIPSRC=/tmp/tree_main/hipsrc timeout 100 python3 notes/debug/phases.py --model $m \
    --rows 256 --movers 0 --ranks 8 --forward-only
done
stamp traced
grep -E "^=====|^-----|passed|failed|^(FAILED|ERROR) |rows/exp|fused|s39: (row_exp|route_token|token_norm)|logits summed|tokens,|Error" "$LOG" \
  | cut -c1-200 | tail -70
printf '%s\n' "${summary[@]}"
