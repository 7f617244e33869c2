#!/usr/bin/env bash
# Session 43's unrun call, for the next session: (1) test_mx + test_tp_mx np 1 and
# test_tp_mx np 2 on main (df4df0a: the pulls' column-band loop without divisions; the dequantize
# kernel row by row again); (2) the 16-byte staging (notes/patches/route_stage_16byte.patch, tree
# S): test_moe_route + test_moe_forward np 1 on it, and its real-E traces against main's (s43_a:
# staging 3.8 / 10.2 us at Qwen3-30B / DeepSeek-V3), also with eight lanes (s43_a: DeepSeek-V3's
# top-k 43 -> 24 us, but two staged rounds a CTA); (3) is the routing's top-k (~10 us of thread
# 0's token even at the share's E 16) the instruction cache? Tree T (route_twice.patch): one copy
# of route_token_lanes run twice, the second marked; tree R (merge_rolled.patch): the lane merge's
# rounds rolled. ~7 min (five phase-trace builds of the forward kernel, ~40 s each).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s44_a.sh
source notes/debug/call_env.sh s44_a
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 4 mx.hip tp.hip gemm.hip moe_route.hip
run "mx np1" timeout 100 python3 -m pytest tests/gpu/test_mx.py tests/gpu/test_tp_mx.py $T
run "tp_mx np2" timeout 150 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_tp_mx.py $T
tree() {  # tree NAME PATCH: this hipsrc with the patch, at /tmp/tree_NAME
  rm -rf /tmp/tree_$1 && mkdir -p /tmp/tree_$1 && cp -r hipsrc /tmp/tree_$1/
  (cd /tmp/tree_$1 && patch -p1 -s < "$OLDPWD/notes/patches/$2.patch") >> "$LOG" 2>&1
}
tree stage route_stage_16byte
run "moe route+forward np1 (S)" env KOSMOS_HIPSRC=/tmp/tree_stage/hipsrc timeout 200 python3 -m pytest \
  tests/gpu/test_moe_route.py tests/gpu/test_moe_forward.py $T
for m in Qwen3-30B-A3B DeepSeek-V3; do
  for t in main stage; do
    h=$PWD/hipsrc; [[ $t == main ]] || h=/tmp/tree_$t/hipsrc
    run "phases $t $m ranks 8" env KOSMOS_HIPSRC=$h timeout 90 python3 notes/debug/phases.py \
      --model $m --rows 256 --movers 0 --ranks 8 --forward-only
  done
  run "phases stage $m ranks 8 lanes 8" env KOSMOS_HIPSRC=/tmp/tree_stage/hipsrc timeout 90 python3 \
    notes/debug/phases.py --model $m --rows 256 --movers 0 --ranks 8 --forward-only -D KOSMOS_ROUTE_LANES=8
done
tree twice route_twice
tree rolled merge_rolled
for t in twice rolled; do
  for a in "--forward-only" "--ranks 8 --forward-only"; do
    run "phases $t Qwen3-30B $a" env KOSMOS_HIPSRC=/tmp/tree_$t/hipsrc timeout 90 python3 notes/debug/phases.py \
      --model Qwen3-30B-A3B --rows 256 --movers 0 $a
  done
done
grep -E "^=====|staged|thread 0|routed \+|plan placed|passed|failed|Error" "$LOG" | grep -v "^  job" | cut -c1-200 | tail -70
printf '%s\n' "${summary[@]}"
