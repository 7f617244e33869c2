#!/usr/bin/env bash
# (1) The TP fused ops' first claim (tree A = main + s42_claim.patch, landed in f923d7d, which
# deleted the patch: to rerun, recreate it with `git diff f923d7d~1 f923d7d -- hipsrc`: with no
# movers, no order table and no two-way -- a rank alone -- a CTA's first tile is its own, as the plain
# GEMM's GridFirstClaim) against main (B): test_tp np 1 and np 2 on A, then bench/tp.py A/B
# (--tree-b) on the world-1 outliers of s42_a (bulk_rs_nt 8B-QKV-MBS8 1.43x the plain GEMM,
# 8B-OProj-MBS1 +2 us; ag_tn 70B-QKV-MBS1 and ag_nn 8B-Down-MBS1 are stream-K in the plain
# GEMM: unchanged predicted). Predicted: 8B-QKV-MBS8 bulk_rs_nt 0.746 -> ~0.52 ms; OProj -0.5 to 1 us.
# (2) The MoE tests at np 3 and 4 (oversubscribed: correctness only), never run since session 20.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s42_b.sh
source notes/debug/call_env.sh s42_b
stamp() { echo "----- $(date +%T) $*" >> "$LOG"; }
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
stamp start
patch_over_main notes/debug/s42_claim.patch tp.hip
run "warm rest" timeout 200 python3 -m kosmos.runtime.warm --jobs 8 moe_fused_forward.hip moe_route.hip moe_fused_backward_f32.hip \
  moe_fused_backward_bf16.hip moe_dispatch.hip moe_combine.hip moe_backward.hip grouped.hip gemm.hip timing.hip symmetric.hip collectives.hip
stamp warmed
run "A: tp np1" timeout 100 python3 -m pytest tests/gpu/test_tp.py $T
run "A: tp np2" timeout 100 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_tp.py $T
stamp tested
S=8B-QKV-MBS8,8B-OProj-MBS1,70B-QKV-MBS1,8B-Down-MBS1,70B-Down-MBS4,8B-QKV-MBS1,70B-OProj-MBS1
run "tp A/B" timeout 150 python3 bench/tp.py --shapes $S --iters 40 --tree-b /tmp/tree_main/hipsrc --out $RUNS
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
stamp benched
run "moe np4" timeout 240 $MPIRUN -np 4 python3 -m mpi4py -m pytest tests/gpu/test_moe_route.py tests/gpu/test_moe_forward.py \
  tests/gpu/test_moe_layer.py tests/gpu/test_moe_dispatch.py tests/gpu/test_moe_combine.py tests/gpu/test_moe_backward_fused.py $T
stamp np4
run "moe np3" timeout 120 $MPIRUN -np 3 python3 -m mpi4py -m pytest tests/gpu/test_moe_forward.py tests/gpu/test_moe_layer.py $T
stamp np3
grep -E "^=====|^-----|passed|failed|^(FAILED|ERROR) |shipped|fused/gemm|Error" "$LOG" | grep -v "^  job" | cut -c1-200 | tail -70
printf '%s\n' "${summary[@]}"
