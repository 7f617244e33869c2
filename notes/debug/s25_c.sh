#!/usr/bin/env bash
# Session 25's third device call (<= 4 min): the phase trace of the fused MoE kernels under the
# EP-8 share that keeps tokens and top-k (cc1a61f), at 2,048 rows per expert: where the backward's
# 1.4 ms over the device path goes at DeepSeek-V3 (H200, s25_a/b: fused 24.3-24.5 ms, device path
# 22.86, GEMMs alone 21.6-21.9).   KOSMOS_COMMIT=<sha> bash notes/debug/s25_c.sh
source notes/debug/call_env.sh s25_c
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "phases DS-V3" timeout 120 python3 notes/debug/phases.py --model DeepSeek-V3 --rows 2048
run "phases Qwen3-235B" timeout 80 python3 notes/debug/phases.py --model Qwen3-235B-A22B --rows 2048
grep -E "^=====|^  |^(forward|backward):|Error|tokens|H100|H200" "$LOG" | cut -c1-220 | tail -90
printf '%s\n' "${summary[@]}"
