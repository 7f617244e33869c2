#!/usr/bin/env bash
# Issue 11's chooser refit data (any card, but the refit counts only from an H200; <= 9 min): the
# ping-pong 128 applied (notes/patches/pingpong128.patch, unless on main already: w128 IS ping-pong
# then), every shape of bench/gemm.py --set both with the forced widths and stream-K beside the
# chooser, then chooser_check.py on it (where the automatic tiling trails the best forced one, with
# the wave model's costs beside the measured times).   KOSMOS_COMMIT=<sha> bash notes/debug/s36_f.sh
source notes/debug/call_env.sh s36_f
apply_pingpong notes/patches/pingpong128.patch
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 90 python3 -m kosmos.runtime.warm --jobs 2 gemm.hip timing.hip
run "bench gemm both" timeout 420 python3 bench/gemm.py --set both --caps 132 --reps 8 --out $RUNS --tag s36_refit
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
run "chooser check" timeout 30 python3 notes/debug/chooser_check.py "$RUNS"/gemm_*.json --worse 0.02
grep -E "^=====|geomean|auto .*best|Error" "$LOG" | cut -c1-300 | tail -40
printf '%s\n' "${summary[@]}"
