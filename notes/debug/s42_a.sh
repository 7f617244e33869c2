#!/usr/bin/env bash
# Issue 11's last table (world 1: the TP+SP fused ops against the plain GEMM on the 120 paper
# shapes, never run since c71fc36) and issue 13's world-1 backward table on main as it stands:
# test_tp np 1, bench/tp.py (24 shapes x 5 kernels), bench/moe.py --backward (the default models,
# 256 / 2,048 rows an expert). ~5 min.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s42_a.sh
source notes/debug/call_env.sh s42_a
stamp() { echo "----- $(date +%T) $*" >> "$LOG"; }
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
stamp start
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 8 tp.hip gemm.hip timing.hip symmetric.hip collectives.hip \
  moe_fused_backward_f32.hip moe_fused_backward_bf16.hip moe_backward.hip grouped.hip moe_fused_forward.hip moe_route.hip
stamp warmed
run "tp np1" timeout 150 python3 -m pytest tests/gpu/test_tp.py $T
stamp tested
run "bench tp" timeout 240 python3 bench/tp.py --iters 15 --out $RUNS
stamp tp
run "bench moe backward" timeout 150 python3 bench/moe.py --backward --rows 256,2048 --iters 10 --warmup 3 --out $RUNS --tag s42a
stamp moe
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|^-----|passed|failed|^(FAILED|ERROR) |geomean|rows/exp|backward|Error" "$LOG" | grep -v "^  job" | cut -c1-220 | tail -60
printf '%s\n' "${summary[@]}"
