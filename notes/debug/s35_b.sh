#!/usr/bin/env bash
# Session 35's second call (<= 9 min, any card), right after s34_d.sh on the same warm machine (its
# kernel cache): the MoE GPU tests in full at world 1 and at 2 oversubscribed ranks (the fused
# backward's memo and argument handling, d63c11b..3ee2378, never run on a GPU before session 35),
# then the grouped GEMM's quick bench with the ping-pong contenders.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s35_b.sh
source notes/debug/call_env.sh s35_b
apply_pingpong
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
T="-q -p no:cacheprovider --timeout=170 --timeout-method=thread -rfE --color=no"
run "warm" timeout 150 python3 -m kosmos.runtime.warm --jobs 8 gemm.hip grouped.hip moe_fused.hip moe_backward.hip records.hip moe_dispatch.hip moe_combine.hip moe_route.hip
run "moe np1" timeout 200 python3 -m pytest tests/gpu/test_moe_layer.py tests/gpu/test_moe_backward_fused.py $T
rm -f /tmp/kosmos_moe_r*.log
run "moe np2" timeout 200 $MPIRUN -np 2 bash -c \
  'exec python3 -m mpi4py -m pytest tests/gpu/test_moe_backward_fused.py tests/gpu/test_moe_layer.py -k "fused or memo or refuses or callers_buffers or training_loop or capacity" '"$T"' > /tmp/kosmos_moe_r$OMPI_COMM_WORLD_RANK.log 2>&1'
for f in /tmp/kosmos_moe_r*.log; do echo "----- $f" >> "$LOG"; tail -n 30 "$f" >> "$LOG"; done
run "moe_train np1" timeout 90 python3 launch/examples/moe_train.py --steps 40 --log 10
run "bench grouped" timeout 150 python3 bench/grouped_gemm.py --quick --out $RUNS --tag s35_pp
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|passed|failed|Error|^-----|geomean|pp|w128|^step|match|loss" "$LOG" | cut -c1-300 | tail -45
printf '%s\n' "${summary[@]}"
