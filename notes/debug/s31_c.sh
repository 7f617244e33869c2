#!/usr/bin/env bash
# s31_b and s30_e in one call (<= 9 min), main as committed, for an H200 (issue 11's and 14's
# target card, not measured there since session 17): tma_ring.py with its L2 variants (s31_b.sh),
# bench/gemm.py --quick --precision mxfp8 (both precisions against cuBLAS, and every MXFP8 route
# matmul did not take: the swap refit's data), then bench/grouped_gemm.py --quick.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s31_c.sh
source notes/debug/call_env.sh s31_c
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 4 gemm.hip mx.hip transpose.hip grouped.hip
run "tma ring" timeout 150 python3 notes/debug/tma_ring.py
run "gemm mx quick" timeout 240 python3 bench/gemm.py --quick --precision mxfp8 --caps 132 --reps 15 --out $RUNS --tag s31_mx
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
run "grouped quick" timeout 140 python3 bench/grouped_gemm.py --quick --out $RUNS
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -vE "^compiling|^ok " "$LOG" | cut -c1-330 | tail -75
printf '%s\n' "${summary[@]}"
