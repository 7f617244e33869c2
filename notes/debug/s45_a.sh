#!/usr/bin/env bash
# Session 45's first call (~7 min): (1) the MXFP8 TP tests on main (03b85b9's host refactor of the
# MXFP8 ops and the late-rank test had never run on a GPU) at np 1-4, np 3 new; (2) the MXFP8-A
# consumers' scale reads as plain loads instead of __ldg (this tree: A) against __ldg (tree B,
# notes/patches/mx_scales_plain_load.patch reversed) on bench/gemm.py --precision mxfp8 --quick;
# (3) the two gaps of the world-1 MXFP8 table, bf16 beside mxfp8 on the same shapes; (4) the whole
# world-1 MXFP8 table (AG+NN(+NT)'s wgrad now in stream-K where matmul would cut it: 8B-OProj was
# 1.23-1.27 of the plain GEMMs with whole tiles); bulk AG || NN's MXFP8 gap taken apart
# (notes/debug/bulk_mx_gap.py: the op with MXFP8 / bf16 dY and W, the bf16 op, the plain GEMMs);
# the host's time a call of AG+NN(+NT) by cProfile (notes/debug/host_profile.py; in the log only).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s45_a.sh
source notes/debug/call_env.sh s45_a
stamp() { echo "----- $(date +%T) $*" >> "$LOG"; }
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
stamp start
patch_under_tree notes/patches/mx_scales_plain_load.patch gemm.hip tp.hip mx.hip transpose.hip
stamp warm
run "tp_mx+tp np1" timeout 200 python3 -m pytest tests/gpu/test_tp_mx.py tests/gpu/test_tp.py $T
for n in 2 3 4; do
  run "tp_mx np$n" timeout 200 $MPIRUN -np $n python3 -m mpi4py -m pytest tests/gpu/test_tp_mx.py $T
done
run "mx np1" timeout 150 python3 -m pytest tests/gpu/test_mx.py $T
stamp tested
run "gemm mx A/B" timeout 240 python3 bench/gemm.py --quick --precision mxfp8 --caps 132 --reps 15 \
  --tree-b /tmp/tree_main/hipsrc --out $RUNS --tag ldg
S=70B-QKV-MBS2,405B-QKV-MBS1,70B-QKV-MBS8,8B-OProj-MBS4
for p in bf16 mxfp8; do
  run "bench $p" timeout 150 python3 bench/tp.py --precision $p --kernels bulk_ag_nn,ag_nn --shapes $S --iters 15 --out $RUNS/$p
done
run "bulk mx gap" timeout 150 python3 notes/debug/bulk_mx_gap.py --iters 20
run "host profile" timeout 100 python3 notes/debug/host_profile.py
run "bench tp mxfp8 all" timeout 200 python3 bench/tp.py --precision mxfp8 --iters 15 --out $RUNS/all
stamp bench
mkdir -p $OUT/json && cp -r "$RUNS"/*.json "$RUNS"/bf16/*.json "$RUNS"/mxfp8/*.json "$RUNS"/all/*.json "$OUT"/json/ 2>/dev/null
sed -n '1,/^===== bench tp mxfp8 all/p' "$LOG" | grep -E "^=====|passed|failed|B/A|mxfp8/bf16|^(bulk_ag_nn|ag_nn) |^-----|^  |^[0-9A-Z]+-" \
  | grep -v "^  job" | cut -c1-180
sed -n '/^===== bench tp mxfp8 all/,$p' "$LOG" | grep -E "^[a-z_]+ +[0-9]+ +[0-9.]+ |^ag_nn +8B-OProj|^-----"
printf '%s\n' "${summary[@]}"
