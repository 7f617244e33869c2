#!/usr/bin/env bash
# Session 31's H200 call (<= 5 min), main as committed: issue 11's and 14's target card, not
# measured since session 17. launch_floor.py (a launch's fixed cost), tma_ring.py with its L2
# variants, bench/gemm.py --quick --precision mxfp8, bench/grouped_gemm.py --quick.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s31_g.sh
source notes/debug/call_env.sh s31_g
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 150 python3 -m kosmos.runtime.warm --jobs 4 gemm.hip mx.hip transpose.hip grouped.hip
run "launch floor" timeout 60 python3 notes/debug/launch_floor.py
run "tma ring" timeout 100 python3 notes/debug/tma_ring.py
run "gemm mx quick" timeout 150 python3 bench/gemm.py --quick --precision mxfp8 --caps 132 --reps 12 --out $RUNS --tag s31_h200_mx
run "grouped quick" timeout 100 python3 bench/grouped_gemm.py --quick --out $RUNS
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -vE "^compiling|^ok " "$LOG" | grep -vE "^(ag_|tn_rs|bulk_)" | cut -c1-300 | tail -75
printf '%s\n' "${summary[@]}"
