#!/usr/bin/env bash
# Session 37: the MoE layer at world 1 on main as it stands (README's table models: DeepSeek-V3,
# Qwen3-235B, Qwen3-30B at 256 and 2,048 rows per expert; forward, then backward), for issues
# 12/13's status.   KOSMOS_COMMIT=<sha> bash notes/debug/s37_h.sh
source notes/debug/call_env.sh s37_h
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 150 python3 -m kosmos.runtime.warm --jobs 8 moe_fused.hip moe_backward.hip grouped.hip gemm.hip moe_route.hip moe_dispatch.hip moe_combine.hip records.hip timing.hip
M="--models DeepSeek-V3,Qwen3-235B-A22B,Qwen3-30B-A3B --rows 256,2048 --iters 10 --warmup 3 --out $RUNS --tag s37h"
run "moe fwd" timeout 150 python3 bench/moe.py $M
run "moe bwd" timeout 180 python3 bench/moe.py --backward $M
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
tail -40 "$LOG" | cut -c1-250
printf '%s\n' "${summary[@]}"
