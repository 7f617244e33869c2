#!/usr/bin/env bash
# Session 44's second call: (1) the MXFP8 AG ops that keep the gathered operand in MXFP8 (the
# *_mx kernels of tp.hip, MXFP8-A builders; bulk AG||NN's X_full MXFP8 and its dY on them; AG+NN(+NT)'s
# dgrad on them in the bf16 ring) --
# test_tp_mx at np 1, 2, 4, test_tp np 1 (the AgParams record grew a field), the MLP block
# example in mxfp8 at np 1-2; (2) route_smaller on main (the rolled lane merge + the
# weights by rolled loops: code run once a call, cold): test_moe_route/forward np 1, and
# the share's and real E's traces of main, before it (tree B) and the rolled merge alone (R);
# (3) the world-1 MXFP8 table (bench/tp.py --precision mxfp8; s43_b had
# ag_tn fused/gemm 1.184). ~9 min (the traces last: a timeout loses only them).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s44_b.sh
# (Ran once at 59a83ad. route_smaller.patch was that tree's rolled merge + rolled weights; after
# the run the merge stayed rolled on main and the weights' part is notes/patches/route_weights_rolled.patch:
# this script no longer rebuilds its "before" tree as written.)
source notes/debug/call_env.sh s44_b
stamp() { echo "----- $(date +%T) $*" >> "$LOG"; }
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
stamp start
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 4 tp.hip gemm.hip mx.hip transpose.hip
run "tp_mx+tp np1" timeout 200 python3 -m pytest tests/gpu/test_tp_mx.py tests/gpu/test_tp.py $T
run "tp_mx np2" timeout 200 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_tp_mx.py $T
run "tp_mx np4" timeout 240 $MPIRUN -np 4 python3 -m mpi4py -m pytest tests/gpu/test_tp_mx.py $T
run "mlp_block mxfp8 np1" timeout 120 python3 launch/examples/mlp_block.py --precision mxfp8
run "mlp_block mxfp8 np2" timeout 150 $MPIRUN -np 2 python3 launch/examples/mlp_block.py --precision mxfp8
stamp tested
run "bench tp mxfp8" timeout 300 python3 bench/tp.py --precision mxfp8 --iters 15 --out $RUNS
stamp bench
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
# main has route_smaller (the rolled merge + the weights by rolled loops); tree B = before it,
# tree R = before + the rolled merge only (merge_rolled.patch)
tree() {  # tree NAME: this hipsrc, then patch ARGS... applied
  local name=$1; shift
  rm -rf /tmp/tree_$name && mkdir -p /tmp/tree_$name && cp -r hipsrc /tmp/tree_$name/
  (cd /tmp/tree_$name && patch -p1 -s "$@" < "$OLDPWD/notes/patches/route_smaller.patch") >> "$LOG" 2>&1
}
tree before -R
tree rolled -R
(cd /tmp/tree_rolled && patch -p1 -s < "$OLDPWD/notes/patches/merge_rolled.patch") >> "$LOG" 2>&1
run "moe route+forward np1" timeout 200 python3 -m pytest tests/gpu/test_moe_route.py tests/gpu/test_moe_forward.py $T
for a in "--forward-only" "--ranks 8 --forward-only"; do
  for t in main before; do
    h=$PWD/hipsrc; [[ $t == main ]] || h=/tmp/tree_$t/hipsrc
    run "phases $t Qwen3-30B $a" env KOSMOS_HIPSRC=$h timeout 90 python3 notes/debug/phases.py \
      --model Qwen3-30B-A3B --rows 256 --movers 0 $a
  done
done
stamp traces
grep -E "^=====|^-----|passed|failed|^(FAILED|ERROR) |geomean|Error" "$LOG" | grep -v "^  job" | cut -c1-220 | tail -40
grep -A6 "fused/gemm" "$LOG"
awk '/^=====/{t=substr($0,1,50)} /rows staged|top-k chosen|row max|plan placed/{print t " | " $0}' "$LOG" | sed 's/  */ /g'
printf '%s\n' "${summary[@]}"
