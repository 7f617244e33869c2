#!/usr/bin/env bash
# Session 38: the fused MoE forward's phase trace on main as it stands (router_splits and the
# forward's own rows in place are in since s26_g's trace): where its prefix (router GEMM, routing,
# plan, dispatch part) and fold go, Qwen3-30B 256 / 2,048 and DeepSeek-V3 256 rows per expert.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s38_b.sh
source notes/debug/call_env.sh s38_b
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
phase_traces "Qwen3-30B-A3B 256" "Qwen3-30B-A3B 2048" "DeepSeek-V3 256"
cat "$LOG" | cut -c1-200 | grep -v "^\s*$" | grep -A22 "^=====\|^forward" | grep -v "job shared\|pairs past\|crew  " | head -120
printf '%s\n' "${summary[@]}"
