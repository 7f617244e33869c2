#!/usr/bin/env bash
# The least of s45_b (~3 min): test_tp_mx + test_tp + test_mx np 1, then AG+NN(+NT) in MXFP8 at the
# 8B-OProj / 8B-Down shapes (its stream-K wgrad) against the plain MXFP8 GEMMs.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s45_c.sh
source notes/debug/call_env.sh s45_c
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 150 python3 -m kosmos.runtime.warm --jobs 4 tp.hip gemm.hip mx.hip transpose.hip
run "tp_mx+tp+mx np1" timeout 150 python3 -m pytest tests/gpu/test_tp_mx.py tests/gpu/test_tp.py tests/gpu/test_mx.py $T
S=8B-OProj-MBS1,8B-OProj-MBS4,8B-OProj-MBS8,8B-Down-MBS2,8B-Down-MBS8
run "bench ag_nn mxfp8" timeout 60 python3 bench/tp.py --precision mxfp8 --kernels ag_nn --shapes $S --iters 15 --out $RUNS
mkdir -p $OUT/json && cp "$RUNS"/*.json "$OUT"/json/ 2>/dev/null
grep -E "^=====|passed|failed|compiled|^ag_nn " "$LOG" | cut -c1-200
printf '%s\n' "${summary[@]}"
