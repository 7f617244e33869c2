#!/usr/bin/env bash
# Session 40: the routing's TopN without its shifting chain (the commit that made
# notes/debug/s40_topn.patch) on the GPU. Tree B = this tree with that patch reversed (the shifting
# form). (1) GPU tests: routing, fused forward, backward, layer at np 1; routing and forward at np 2
# (oversubscribed: correctness only); (2) bench/moe.py forward A/B interleaved (--tree-b); (3) the
# phase trace with s39's marks inside one token (route_token's share).
# Predicted (H100): route_token 13.6 -> ~3 us at Qwen3-30B 256, 35.6 -> ~8 us at DeepSeek-V3 256;
# fused forward -10 us / -25 us there; nothing at 2,048 rows beyond the same microseconds.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s40_c.sh
source notes/debug/call_env.sh s40_c
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
rm -rf /tmp/tree_main && mkdir -p /tmp/tree_main && cp -r hipsrc /tmp/tree_main/
(cd /tmp/tree_main && git apply -R "$OLDPWD/notes/debug/s40_topn.patch") >> "$LOG" 2>&1 \
  || { echo "the patch does not reverse-apply" | tee -a "$LOG"; exit 1; }
KOSMOS_HIPSRC=/tmp/tree_main/hipsrc timeout 200 python3 -m kosmos.runtime.warm --jobs 2 moe_fused_forward.hip moe_route.hip \
  > "$OUT/warm_b.log" 2>&1 &
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 11 moe_fused_forward.hip moe_fused_backward_f32.hip \
  moe_fused_backward_bf16.hip moe_route.hip moe_backward.hip grouped.hip gemm.hip moe_dispatch.hip moe_combine.hip \
  records.hip timing.hip
wait
cat "$OUT/warm_b.log" >> "$LOG"
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "moe route/forward/backward/layer np1" timeout 300 python3 -m pytest tests/gpu/test_moe_route.py \
  tests/gpu/test_moe_forward.py tests/gpu/test_moe_backward_fused.py tests/gpu/test_moe_layer.py $T
run "moe route/forward np2" timeout 200 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_route.py \
  tests/gpu/test_moe_forward.py $T
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 20 --warmup 3 --tree-b /tmp/tree_main/hipsrc --out $RUNS"
run "moe fwd A/B" timeout 200 python3 bench/moe.py $B --tag s40c
cp "$RUNS"/moe*.json "$OUT"/ 2>/dev/null
git apply notes/debug/s39_e_marks.patch >> "$LOG" 2>&1 || { echo "marks: no apply" | tee -a "$LOG"; exit 1; }
phase_traces "Qwen3-30B-A3B 256" "DeepSeek-V3 256"
grep -E "^=====|passed|failed|^(FAILED|ERROR) |rows/exp|fused|s39:|router|routed|plan placed|Error" "$LOG" \
  | grep -v "^  job" | cut -c1-200 | tail -60
printf '%s\n' "${summary[@]}"
