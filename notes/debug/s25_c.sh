#!/usr/bin/env bash
# Session 25's third device call (<= 5 min): the phase trace of the fused MoE kernels under the
# EP-8 share that keeps tokens and top-k (cc1a61f), at 2,048 rows per expert: where the backward's
# 1.4 ms over the device path goes at DeepSeek-V3 (H200, s25_a/b: fused 24.3-24.5 ms, device path
# 22.86, GEMMs alone 21.6-21.9).   KOSMOS_COMMIT=<sha> bash notes/debug/s25_c.sh
source notes/debug/call_env.sh s25_c
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "phases DS-V3" timeout 150 python3 notes/debug/phases.py --model DeepSeek-V3 --rows 2048 --movers 0,33
run "bench bwd movers" timeout 150 python3 bench/moe.py --backward --models DeepSeek-V3 --rows 2048 --movers 0,16,33 --iters 10 --warmup 3 --out $RUNS --tag s25
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|^  |rows/exp|fused backward|unheld|^(forward|backward):|Error|tokens|H100|H200" "$LOG" | cut -c1-220 | tail -90
printf '%s\n' "${summary[@]}"
