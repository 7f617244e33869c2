#!/usr/bin/env bash
# Session 30's H200 call (<= 9 min, main as committed): issue 14's target is stated on the H200
# (MXFP8 path >= 0.90x our bf16 GEMM), not measured there since session 17, nor its per-card
# MXFP8-A width (MX_A_COLUMNS_BY_CARD["H200"] = 2048, session 16). bench/gemm.py --quick in both
# precisions (the mxfp8 run also times bf16 and cuBLAS: issue 11's dense numbers on this card),
# then the grouped quick set if time is left. (Session 31: the mxfp8 run now also times every
# MXFP8 route matmul did not take; tma_ring.py moved to s31_a.sh.)
#   KOSMOS_COMMIT=<sha> bash notes/debug/s30_e.sh
source notes/debug/call_env.sh s30_e
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 4 gemm.hip mx.hip transpose.hip grouped.hip
run "gemm mx quick" timeout 300 python3 bench/gemm.py --quick --precision mxfp8 --caps 132 --reps 15 --out $RUNS --tag s30_h200_mx
run "grouped quick" timeout 150 python3 bench/grouped_gemm.py --quick --out $RUNS
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|compiled|mxfp8/bf16|layout|dense|rows|GB/s|CTAs" "$LOG" | cut -c1-240 | tail -60
printf '%s\n' "${summary[@]}"
