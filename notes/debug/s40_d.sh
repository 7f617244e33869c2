#!/usr/bin/env bash
# Session 40: route_token on eight top slots (notes/debug/s40_topn8.patch applied: tree A) against
# sixteen (main: tree B), and what one token costs with the router's real E
# (phases.py --ranks 8: all of an EP-8 layout's experts on the one GPU, so the rule runs over 128
# experts for Qwen3-30B and 256 in 8 groups for DeepSeek-V3, as on each rank of 8 GPUs; at --ranks 1
# the share's 16 / 32). (1) GPU tests: routing and fused forward at np 1; (2) bench/moe.py forward
# A/B; (3) phase traces with s39's marks, forward only, both trees, at --ranks 8.
# Predicted (H100): route_token 8.2 -> ~5.5 us (Qwen3-30B share), 23.8 -> ~15 us (DeepSeek-V3
# share); at the real E, ~8x the share's per-token time on sixteen slots (~60 us / ~190 us).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s40_d.sh
source notes/debug/call_env.sh s40_d
patch_over_main notes/debug/s40_topn8.patch moe_fused_forward.hip
run "warm rest" timeout 200 python3 -m kosmos.runtime.warm --jobs 9 moe_route.hip grouped.hip gemm.hip \
  moe_dispatch.hip moe_combine.hip records.hip timing.hip moe_backward.hip moe_fused_backward_f32.hip
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "moe route/forward np1" timeout 200 python3 -m pytest tests/gpu/test_moe_route.py tests/gpu/test_moe_forward.py $T
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 20 --warmup 3 --tree-b /tmp/tree_main/hipsrc --out $RUNS"
run "moe fwd A/B" timeout 200 python3 bench/moe.py $B --tag s40d
cp "$RUNS"/moe*.json "$OUT"/ 2>/dev/null
git apply notes/debug/s39_e_marks.patch >> "$LOG" 2>&1 || { echo "marks: no apply" | tee -a "$LOG"; exit 1; }
(cd /tmp/tree_main && git apply --include='hipsrc/*' "$OLDPWD/notes/debug/s39_e_marks.patch") >> "$LOG" 2>&1 \
  || { echo "marks B: no apply" | tee -a "$LOG"; exit 1; }
for m in Qwen3-30B-A3B DeepSeek-V3; do
  run "phases A $m 256 ranks 8" timeout 150 python3 notes/debug/phases.py --model $m --rows 256 --movers 0 --ranks 8 --forward-only
  run "phases B $m 256 ranks 8" env KOSMOS_HIPSRC=/tmp/tree_main/hipsrc timeout 150 python3 notes/debug/phases.py --model $m \
    --rows 256 --movers 0 --ranks 8 --forward-only
done
grep -E "^=====|passed|failed|^(FAILED|ERROR) |rows/exp|fused|s39: (row_exp|route_token|token_norm)|logits summed|tokens,|Error" "$LOG" \
  | cut -c1-200 | tail -60
printf '%s\n' "${summary[@]}"
