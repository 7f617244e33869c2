#!/usr/bin/env bash
# Session 19: the fused backward's combine crew (0 against the default, a sixteenth of the grid = 8).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s19_crew_call.sh
source notes/debug/call_env.sh s19d
run "bench bwd crews" timeout 500 python3 bench/moe.py --backward --models DeepSeek-V3,Qwen3-30B-A3B --rows 256,2048 --iters 10 --warmup 3 --crew 0,8 --out "$RUNS" --tag s19_crew
cp $RUNS/*.json "$OUT"/ 2>/dev/null
grep -vE "^\s*$" "$LOG" | grep -vi warn | tail -40
printf '%s\n' "${summary[@]}"
