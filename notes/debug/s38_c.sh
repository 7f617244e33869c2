#!/usr/bin/env bash
# Session 38: the in-launch routing's per-token work on the GPU against tree B (main before it):
# route.h's TopN in registers (990ee07), then the row's max and exp-sum once for the rule and the
# losses' norm. (1) the routing's GPU tests, the fused forward's and the layer's (np 1); (2)
# bench/moe.py forward, this tree vs B, interleaved; (3) the phase trace (s38_b's cases).
# Predicted (H100) for the TopN: "routed + counted" - "router GEMM done" 20-27 us -> ~8-10
# (Qwen3-30B), 63 -> ~25 (DeepSeek-V3 256). Its first run (990ee07 alone, no A/B): 27 -> 23.5,
# 63 -> 45; the norm's reuse predicted ~-3 us more (two of the ~six passes over a row).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s38_c.sh
source notes/debug/call_env.sh s38_c
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
# Tree B: main before the change, carried (`git archive <sha> hipsrc | tar -x -C build/old_tree`;
# the device's copy has no git history).
TB=$PWD/build/old_tree/hipsrc
[ -d "$TB" ] || { echo "no $TB: carry build/old_tree" | tee -a "$LOG"; exit 1; }
W="moe_fused.hip moe_route.hip moe_backward.hip"
KOSMOS_HIPSRC=$TB timeout 200 python3 -m kosmos.runtime.warm --jobs 3 $W > "$OUT/warm_b.log" 2>&1 &
warm_b=$!
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 8 $W grouped.hip gemm.hip moe_dispatch.hip moe_combine.hip records.hip timing.hip
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "moe route/forward/layer np1" timeout 280 python3 -m pytest tests/gpu/test_moe_route.py tests/gpu/test_moe_forward.py tests/gpu/test_moe_layer.py $T
wait $warm_b; cat "$OUT/warm_b.log" >> "$LOG"
run "moe fwd A/B" timeout 200 python3 bench/moe.py --models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 15 --warmup 3 \
  --tree-b $TB --out $RUNS --tag s38c
cp "$RUNS"/moe*.json "$OUT"/ 2>/dev/null
phase_traces "Qwen3-30B-A3B 256" "Qwen3-30B-A3B 2048" "DeepSeek-V3 256"
grep -E "^=====|passed|failed|^(FAILED|ERROR) |rows/exp|fused|router GEMM|routed|plan placed|dispatch part|GEMM1|combine done|Error" "$LOG" | grep -v "^backward" | cut -c1-220 | tail -60
printf '%s\n' "${summary[@]}"
