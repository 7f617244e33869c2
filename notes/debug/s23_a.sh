#!/usr/bin/env bash
# Session 23's first device call (~6 min): the fused MoE kernels' phase trace at DeepSeek-V3 2,048
# (issue 13: where the backward's 4.4 ms go), the forward with token dropping (issue 12: no bench
# row yet), the training example at np 2 and 4 (oversubscribed: correctness only).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s23_a.sh
source notes/debug/call_env.sh s23_a
run "phases DS-V3" timeout 150 python3 notes/debug/phases.py --model DeepSeek-V3 --rows 2048
run "phases Qwen3-30B" timeout 90 python3 notes/debug/phases.py --model Qwen3-30B-A3B --rows 2048
B="--models DeepSeek-V3,Qwen3-30B-A3B --rows 2048 --iters 10 --warmup 3 --drop 1.0,1.25 --out $RUNS --tag s23"
run "bench fwd drop" timeout 200 python3 bench/moe.py $B
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
run "moe_train np2" timeout 120 $MPIRUN -np 2 python3 launch/examples/moe_train.py --steps 100 --log 25
run "moe_train np4" timeout 120 $MPIRUN -np 4 python3 launch/examples/moe_train.py --steps 100 --log 25
grep -E "^=====|passed|failed|^#|^step|^MoE|^loss|rows/exp|ms$|fused|layer/experts|^  |^(forward|backward):" "$LOG" | cut -c1-220 | tail -90
printf '%s\n' "${summary[@]}"
