#!/usr/bin/env bash
# For session 25's first device call (<= 9.5 min): bench/moe.py's new baseline under the EP-8 share
# that keeps the model's tokens and top-k per rank (cc1a61f), forward and backward, the three
# default models at 256 and 2,048 rows per expert; then the whole tests/gpu at np 1.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s25_a.sh
source notes/debug/call_env.sh s25_a
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
B="--rows 256,2048 --iters 10 --warmup 3 --out $RUNS --tag s25"
run "bench fwd" timeout 170 python3 bench/moe.py $B
run "bench bwd" timeout 170 python3 bench/moe.py --backward $B
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no"
run "gpu np1" timeout 230 python3 -m pytest tests/gpu $T
grep -E "^=====|^(FAILED|ERROR) |passed|failed|rows/exp|fused|unheld|layer/experts|Error|H100|H200" "$LOG" | cut -c1-240 | tail -60
printf '%s\n' "${summary[@]}"
