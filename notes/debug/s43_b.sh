#!/usr/bin/env bash
# Issue 14 at world 1 on main as it stands: the MXFP8 GPU tests (formats, GEMM path, the five fused
# ops) at np 1, then bench/tp.py --precision mxfp8 over the 120 paper shapes (fused vs the plain
# MXFP8 GEMM vs unfused vs baseline; its last full run was session 5's quick set). Also the
# column-band dequantization (3eb7a57, notes/patches/dequant_col_bands.patch: each scale read once a
# band): test_tp_mx at np 2 (oversubscribed: the pulls of peers' column-wise shards, correctness
# only) and the dequantize kernel A/B against the tree without it. ~5 min.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s43_b.sh
source notes/debug/call_env.sh s43_b
stamp() { echo "----- $(date +%T) $*" >> "$LOG"; }
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
stamp start
patch_under_tree notes/patches/dequant_col_bands.patch tp.hip gemm.hip timing.hip mx.hip transpose.hip symmetric.hip collectives.hip
run "mx np1" timeout 200 python3 -m pytest tests/gpu/test_mx.py tests/gpu/test_tp_mx.py $T
run "tp_mx np2" timeout 200 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_tp_mx.py $T
stamp tested
run "dequant A/B" timeout 120 python3 notes/debug/dequant_ab.py --tree-b /tmp/tree_main/hipsrc
stamp dequant
run "bench tp mxfp8" timeout 300 python3 bench/tp.py --precision mxfp8 --iters 15 --out $RUNS
stamp bench
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|^-----|passed|failed|^(FAILED|ERROR) |geomean|Error" "$LOG" | grep -v "^  job" | cut -c1-220 | tail -30
grep -A6 "fused/gemm" "$LOG"
grep -E "B/A|bitwise" "$LOG" | tail -14
printf '%s\n' "${summary[@]}"
