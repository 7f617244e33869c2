#!/usr/bin/env bash
# Issue 11's tables on the H200 (its target card) with main as it stands: the GEMM + grouped GPU
# tests at np 1 and np 2 (oversubscribed: correctness only), bench/gemm.py on both shape sets (SM caps
# 132 and 116 on Figure 2's shapes), the chooser's fit (session 37's changes, never run on an
# H200), and bench/grouped_gemm.py (three models' EP-8 shares, 256-4,096 rows per expert, balanced
# and skewed). ~6 min. Only an H200 counts for the targets: it stops on another card.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s41_c.sh
source notes/debug/call_env.sh s41_c
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$gpu" | tee -a "$LOG"
case "$gpu" in *H200*) ;; *) echo "not an H200: nothing run"; exit 0 ;; esac
stamp() { echo "----- $(date +%T) $*" >> "$LOG"; }
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
stamp start
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 3 gemm.hip grouped.hip timing.hip
run "gemm+grouped np1" timeout 150 python3 -m pytest tests/gpu/test_gemm.py tests/gpu/test_grouped.py $T
run "gemm+grouped np2" timeout 150 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_gemm.py tests/gpu/test_grouped.py $T
stamp tested
run "bench gemm both" timeout 300 python3 bench/gemm.py --set both --caps 132,116 --reps 8 --out $RUNS --tag s41_c
stamp gemm
run "chooser check" timeout 30 python3 notes/debug/chooser_check.py "$RUNS"/gemm_*.json --worse 0.02
run "bench grouped" timeout 200 python3 bench/grouped_gemm.py --iters 10 --out $RUNS --tag s41_c
stamp grouped
cp "$RUNS"/*.json "$RUNS"/*.png "$OUT"/ 2>/dev/null
grep -E "^=====|^-----|passed|failed|^group|^layout|geomean|TILE_EFF|GEMM[12] |rows/expert|^ +[0-9]+ +(balanced|skewed)|median|Error|WRONG" "$LOG" | cut -c1-300 | tail -80
printf '%s\n' "${summary[@]}"
