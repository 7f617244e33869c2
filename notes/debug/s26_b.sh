#!/usr/bin/env bash
# For session 26 (<= 8 min): bench/moe.py --tree-b checked on a GPU (written in session 25, run on
# no GPU yet): an A/A (tree B = a copy of this hipsrc: the same kernels, so every "B" contender
# should match its twin within the run's noise) at Qwen3-30B and DeepSeek-V3 2,048 rows, forward and
# backward; the spread between twins is the noise floor of an in-run kernel A/B. Then
# notes/debug/bwd_alone.py: the fused backward alone against the bench's step - forward.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s26_b.sh
source notes/debug/call_env.sh s26_b
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
rm -rf /tmp/tree_b && mkdir -p /tmp/tree_b && cp -r hipsrc /tmp/tree_b/
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 2048 --iters 15 --warmup 3 --out $RUNS --tag s26 --tree-b /tmp/tree_b/hipsrc"
run "bench fwd A/A" timeout 150 python3 bench/moe.py $B
run "bench bwd A/A" timeout 150 python3 bench/moe.py --backward $B
run "bwd alone" timeout 120 python3 notes/debug/bwd_alone.py --models DeepSeek-V3,Qwen3-30B-A3B
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|rows/exp|fused|unheld|alone|Error|H100|H200" "$LOG" | cut -c1-240 | tail -40
printf '%s\n' "${summary[@]}"
