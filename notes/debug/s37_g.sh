#!/usr/bin/env bash
# Session 37's H200 check of what landed on the H100's numbers (the chooser's target card): every
# shape of bench/gemm.py --set both (ping-pong 128, the new stream-K split and its one-round charge
# are main's now), chooser_check.py's fit on it, sk_tail.py's split A/B. ~2-3 min on an H100.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s37_g.sh
source notes/debug/call_env.sh s37_g
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 120 python3 -m kosmos.runtime.warm --jobs 2 gemm.hip timing.hip
run "bench gemm both" timeout 300 python3 bench/gemm.py --set both --caps 132 --reps 8 --out $RUNS --tag s37_g
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
run "chooser check" timeout 30 python3 notes/debug/chooser_check.py "$RUNS"/gemm_*.json --worse 0.02
run "sk tail" timeout 200 python3 notes/debug/sk_tail.py --iters 10 --out "$OUT/sk_tail.json"
grep -E "^=====|^group|^layout|^ag_|^tn_|^bulk|^small|^square|^odd|^experts|^control|geomean|TILE_EFF|median|tiles .*slabs|Error|WRONG" "$LOG" | cut -c1-330 | tail -70
printf '%s\n' "${summary[@]}"
