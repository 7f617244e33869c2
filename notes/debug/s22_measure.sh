#!/usr/bin/env bash
# Session 22's second device call (<= 10 min): the training example on path "fused" (np 1; np 2
# oversubscribed: correctness only), the router-phase A/B (as built vs notes/patches/router_one_pass.patch),
# bench/moe.py forward and backward at 2,048 rows per expert on DeepSeek-V3, Qwen3-235B, Qwen3-30B.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s22_measure.sh
source notes/debug/call_env.sh s22_measure
T="-q -p no:cacheprovider --timeout=120 --timeout-method=thread -rfE --color=no"
F="tests/gpu/test_moe_forward.py -k capacity"
run "capacity np1" timeout 100 python3 -m pytest $F $T
run "capacity np2" timeout 60 $MPIRUN -np 2 python3 -m mpi4py -m pytest $F $T
run "capacity np4" timeout 60 $MPIRUN -np 4 python3 -m mpi4py -m pytest $F $T
run "moe_train np1" timeout 100 python3 launch/examples/moe_train.py --steps 100 --log 20
M="--models DeepSeek-V3,Qwen3-30B-A3B --rows 2048"
run "as built" timeout 80 python3 notes/debug/router_bwd_ab.py $M
rm -rf /tmp/hs_op && cp -r hipsrc /tmp/hs_op && (cd /tmp/hs_op && git apply -p2 "$OLDPWD/notes/patches/router_one_pass.patch") \
  && echo "variant: one-pass d w" >> "$LOG"
KOSMOS_HIPSRC=/tmp/hs_op run "one-pass d w" timeout 80 python3 notes/debug/router_bwd_ab.py $M
B="--models DeepSeek-V3,Qwen3-30B-A3B --rows 2048 --iters 10 --warmup 3 --out $RUNS --tag s22"
run "bench bwd" timeout 180 python3 bench/moe.py --backward $B
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|passed|failed|^#|^step|^MoE|^loss|rows/exp|ms$|variant|fused backward|layer/experts" "$LOG" | cut -c1-200 | tail -60
printf '%s\n' "${summary[@]}"
