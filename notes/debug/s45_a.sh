#!/usr/bin/env bash
# Session 45's first call (~7 min, the most wanted first): (1) test_tp_mx + test_tp np 1 (03b85b9's
# host refactor of the MXFP8 ops and the late-rank test never ran on a GPU; AG+NN(+NT)'s wgrad now
# in stream-K where matmul would cut it, its forced-stream-K test with a late rank); (2) the whole
# world-1 MXFP8 table (8B-OProj's AG+NN(+NT) was 1.23-1.27 of the plain GEMMs with whole tiles);
# (3) bulk AG || NN's MXFP8 gap taken apart (notes/debug/bulk_mx_gap.py); (4) test_tp_mx np 2-3
# (np 3 never ran); (5) the MXFP8-A consumers' scales by plain loads (this tree: A) against __ldg
# (tree B, notes/patches/mx_scales_plain_load.patch reversed): test_mx, bench/gemm.py --precision
# mxfp8 --quick A/B; (6) the host's time a call of AG+NN(+NT) by cProfile (notes/debug/host_profile.py).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s45_a.sh
source notes/debug/call_env.sh s45_a
stamp() { echo "----- $(date +%T) $*" >> "$LOG"; }
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
stamp start
patch_under_tree notes/patches/mx_scales_plain_load.patch gemm.hip tp.hip mx.hip transpose.hip
stamp warm
run "tp_mx+tp np1" timeout 150 python3 -m pytest tests/gpu/test_tp_mx.py tests/gpu/test_tp.py $T
stamp tested
run "bench tp mxfp8 all" timeout 120 python3 bench/tp.py --precision mxfp8 --iters 15 --out $RUNS/all
stamp bench
mkdir -p $OUT/json && cp "$RUNS"/all/*.json "$OUT"/json/ 2>/dev/null
run "bulk mx gap" timeout 90 python3 notes/debug/bulk_mx_gap.py --iters 20
for n in 2 3; do
  run "tp_mx np$n" timeout 100 $MPIRUN -np $n python3 -m mpi4py -m pytest tests/gpu/test_tp_mx.py $T
done
run "mx np1" timeout 60 python3 -m pytest tests/gpu/test_mx.py $T
run "gemm mx A/B" timeout 150 python3 bench/gemm.py --quick --precision mxfp8 --caps 132 --reps 15 \
  --tree-b /tmp/tree_main/hipsrc --out $RUNS --tag ldg
cp "$RUNS"/*.json "$OUT"/json/ 2>/dev/null
run "host profile" timeout 90 python3 notes/debug/host_profile.py --only 8B-OProj --profile --calls 200
stamp end
grep -E "^=====|passed|failed|B/A|mxfp8/bf16|^-----|^  (dy_|op_)|^[0-9A-Z]+-[A-Za-z0-9]+-MBS[0-9] +m |^== " "$LOG" \
  | grep -v "^  job" | cut -c1-200
sed -n '/^===== bench tp mxfp8 all/,/^===== bulk/p' "$LOG" | grep -E "^[a-z_]+ +[0-9]+ +[0-9.]+ |^ag_nn +8B-(OProj|Down)"
printf '%s\n' "${summary[@]}"
