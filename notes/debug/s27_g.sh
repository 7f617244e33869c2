#!/usr/bin/env bash
# Session 27's last device call (<= 9.5 min): the SwiGLU epilogues without per-element branches
# (epilogue.h: math unguarded, only the stores guarded; rcp_approx instead of __frcp_rn's slow-path
# call; ncu in s27 showed the grouped SwiGLU GEMMs 1.3x (forward) and 2.3x (dgrad2) the plain
# store at Qwen3-30B 2,048, their consumers latency-bound in the epilogue). Tree B = main's HEAD
# (build/old_tree, carried: `git archive HEAD kosmos hipsrc bench | tar -x -C build/old_tree`).
# Predicted (H100): fwd1 swiglu 0.378 -> ~0.32 ms, dgrad2 swiglu 0.347 -> ~0.25 at Qwen3-30B 2,048;
# the fused forward -0.03..-0.05 ms, the fused backward -0.05..-0.1 ms there.
#   KOSMOS_COMMIT=<sha>+swiglu_epi bash notes/debug/s27_g.sh
source notes/debug/call_env.sh s27_g
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
TB=$PWD/build/old_tree/hipsrc
KOSMOS_HIPSRC=$TB timeout 200 python3 -m kosmos.runtime.warm --jobs 6 moe_fused.hip moe_backward.hip grouped.hip moe_dispatch.hip moe_combine.hip moe_route.hip > "$OUT/warm_b.log" 2>&1 &
warm_b=$!
run "warm A" timeout 200 python3 -m kosmos.runtime.warm --jobs 10
wait $warm_b
cat "$OUT/warm_b.log" >> "$LOG"
run "parts A/B" timeout 110 python3 bench/moe_gemm_parts.py --tree-b $TB
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "gpu np1" timeout 170 python3 -m pytest tests/gpu $T
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 10 --warmup 3 --out $RUNS --tag s27g --tree-b $TB"
run "bench fwd A/B" timeout 90 python3 bench/moe.py $B
run "bench bwd A/B" timeout 90 python3 bench/moe.py --backward $B
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|compiled|^(FAILED|ERROR) |passed|failed|rows/exp|rows/expert|ours|fused|Error" "$LOG" | cut -c1-200 | tail -80
printf '%s\n' "${summary[@]}"
