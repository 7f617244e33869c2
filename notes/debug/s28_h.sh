#!/usr/bin/env bash
# Session 28's eighth device call (<= 5 min): s28_g's A/B again (five_stages.patch against main),
# more repetitions, to tell its 192-wide gains (NT 8B-QKV B/A 0.905, grouped Qwen3-30B GEMM1 256
# rows 1.03) and the MXFP8-A tile's (~1 % either way) from run-to-run noise.
#   KOSMOS_COMMIT=<sha>+five_stages bash notes/debug/s28_h.sh
source notes/debug/call_env.sh s28_h
patch_over_main notes/patches/five_stages.patch grouped.hip gemm.hip mx.hip
run "gemm A/B" timeout 200 python3 bench/gemm.py --quick --precision mxfp8 --caps 132 --reps 30 --tree-b /tmp/tree_main/hipsrc --out $RUNS --tag s28_five2
run "grouped A/B" timeout 120 python3 bench/grouped_gemm.py --quick --iters 25 --tree-b /tmp/tree_main/hipsrc --out $RUNS
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|compiled|^(FAILED|ERROR) |passed|failed|B/A|Error|patch|^layout|geomean" "$LOG" | grep -v "^ag_\|^tn_\|^bulk" | cut -c1-200 | tail -40
printf '%s\n' "${summary[@]}"
