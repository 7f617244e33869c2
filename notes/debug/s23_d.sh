#!/usr/bin/env bash
# Session 23's fourth device call (~5 min): the backward's combine crew at world 1, 8 (the old
# default) against the new default (0 at world 1), bench/moe.py --backward; then the fused
# backward's tests at np 1 under the new default.   KOSMOS_COMMIT=<sha> bash notes/debug/s23_d.sh
source notes/debug/call_env.sh s23_d
B="--models DeepSeek-V3,Qwen3-30B-A3B --rows 2048 --iters 10 --warmup 3 --crew 8,auto --out $RUNS --tag s23"
run "bench bwd crew" timeout 220 python3 bench/moe.py --backward $B
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
T="-q -p no:cacheprovider --timeout=120 --timeout-method=thread -rfE --color=no"
run "bwd tests np1" timeout 150 python3 -m pytest tests/gpu/test_moe_backward_fused.py $T
grep -E "^=====|^(FAILED|ERROR) |passed|failed|rows/exp|fused backward|unheld" "$LOG" | cut -c1-260 | tail -30
printf '%s\n' "${summary[@]}"
