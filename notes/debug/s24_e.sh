#!/usr/bin/env bash
# Session 24's fifth device call (~5 min): the MoE backward's router dx job (RX) after wgrad2
# instead of second (its fp32 stores slowed the side pushes that dgrad2 waits for at Qwen3-30B):
# the fused backward's tests at np 1, bench --backward against the previous tree (build/old_tree =
# 36b775a's kosmos + hipsrc + bench, carried; each run against its own device path).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s24_e.sh
source notes/debug/call_env.sh s24_e
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
T="-q -p no:cacheprovider --timeout=120 --timeout-method=thread -rfE --color=no"
run "bwd tests np1" timeout 150 python3 -m pytest tests/gpu/test_moe_backward_fused.py $T
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 2048 --iters 20 --warmup 3 --out $RUNS --tag s24"
run "bench bwd new" timeout 130 python3 bench/moe.py --backward $B
run "bench bwd old" bash -c "cd build/old_tree && PYTHONPATH=\$PWD timeout 150 python3 bench/moe.py --backward $B"
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|^(FAILED|ERROR) |passed|failed|rows/exp|fused backward|unheld|Error|H100|H200|^  |^backward" "$LOG" | cut -c1-240 | tail -70
printf '%s\n' "${summary[@]}"
