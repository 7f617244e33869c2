#!/usr/bin/env bash
# Issue 14 at world 1 on main as it stands: the MXFP8 GPU tests (formats, GEMM path, the five fused
# ops) at np 1, then bench/tp.py --precision mxfp8 over the 120 paper shapes (fused vs the plain
# MXFP8 GEMM vs unfused vs baseline; its last full run was session 5's quick set). ~4 min.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s43_b.sh
source notes/debug/call_env.sh s43_b
stamp() { echo "----- $(date +%T) $*" >> "$LOG"; }
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
stamp start
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 6 tp.hip gemm.hip timing.hip mx.hip transpose.hip symmetric.hip collectives.hip
run "mx np1" timeout 200 python3 -m pytest tests/gpu/test_mx.py tests/gpu/test_tp_mx.py $T
stamp tested
run "bench tp mxfp8" timeout 300 python3 bench/tp.py --precision mxfp8 --iters 15 --out $RUNS
stamp bench
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|^-----|passed|failed|^(FAILED|ERROR) |geomean|Error" "$LOG" | grep -v "^  job" | cut -c1-220 | tail -30
grep -A6 "fused/gemm" "$LOG"
printf '%s\n' "${summary[@]}"
