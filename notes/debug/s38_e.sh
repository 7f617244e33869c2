#!/usr/bin/env bash
# Session 38: the in-launch routing's steps apart (phase slots 16-18: the router GEMM's grid
# barrier passed, its split-K logits summed, a round's tokens routed before the chunk counts), to
# see which of its ~24 us (Qwen3-30B) / ~47 us (DeepSeek-V3 256) is the per-token rule.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s38_e.sh
source notes/debug/call_env.sh s38_e
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
phase_traces "Qwen3-30B-A3B 256" "Qwen3-30B-A3B 2048" "DeepSeek-V3 256"
grep -E "^=====|router|routed|plan placed|dispatch part" "$LOG" | grep -v "^backward" | cut -c1-200 | head -40
printf '%s\n' "${summary[@]}"
