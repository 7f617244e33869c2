#!/usr/bin/env bash
# Session 37: which tiles stream-K should cut (notes/debug/sk_tail.py: the split stream_k_split
# chooses against cutting only the last partial wave, beside cuBLAS and every forced width, with
# the wave model's times; ping-pong 128 applied, so w128 is it). <= 4 min; the model's refit
# counts from an H200 only.   KOSMOS_COMMIT=<sha> bash notes/debug/s37_c.sh
source notes/debug/call_env.sh s37_c
apply_pingpong notes/patches/pingpong128.patch
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 90 python3 -m kosmos.runtime.warm --jobs 2 gemm.hip timing.hip
run "sk tail" timeout 200 python3 notes/debug/sk_tail.py --iters 10 --out "$OUT/sk_tail.json"
grep -E "^=====|tiles|Error|BITWISE" "$LOG" | cut -c1-330 | tail -30
printf '%s\n' "${summary[@]}"
