#!/usr/bin/env bash
# s45_a.sh cut to ~5 min for the device time left in session 45 (no __ldg A/B, no host profile):
# test_tp_mx + test_tp + test_mx + test_gemm np 1 (Problem grew b_scales), the world-1 MXFP8 table, the bulk gap apart, test_tp_mx np 2-3.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s45_b.sh
source notes/debug/call_env.sh s45_b
stamp() { echo "----- $(date +%T) $*" >> "$LOG"; }
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
stamp start
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 4 tp.hip gemm.hip mx.hip transpose.hip
stamp warm
run "tp_mx+tp+mx+gemm np1" timeout 200 python3 -m pytest tests/gpu/test_tp_mx.py tests/gpu/test_tp.py tests/gpu/test_mx.py \
  tests/gpu/test_gemm.py $T
stamp tested
run "bench tp mxfp8 all" timeout 120 python3 bench/tp.py --precision mxfp8 --iters 15 --out $RUNS/all
stamp bench
mkdir -p $OUT/json && cp "$RUNS"/all/*.json "$OUT"/json/ 2>/dev/null
run "bulk mx gap" timeout 90 python3 notes/debug/bulk_mx_gap.py --iters 20
for n in 2 3; do
  run "tp_mx np$n" timeout 100 $MPIRUN -np $n python3 -m mpi4py -m pytest tests/gpu/test_tp_mx.py $T
done
stamp end
grep -E "^=====|passed|failed|^-----|^  (dy_|op_)|^[0-9A-Z]+-[A-Za-z0-9]+-MBS[0-9] +m |compiled" "$LOG" | cut -c1-200
sed -n '/^===== bench tp mxfp8 all/,/^===== bulk/p' "$LOG" | grep -E "^[a-z_]+ +[0-9]+ +[0-9.]+ |^ag_nn +8B-(OProj|Down)"
printf '%s\n' "${summary[@]}"
