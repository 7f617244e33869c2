#!/usr/bin/env bash
# Session 39: where one token's ~16-19 us goes in the launch's routing (main's one-thread form;
# at Qwen3-30B's EP-8 share the rule is over 16 experts, top-8: far too long for its arithmetic,
# and not instruction fetch: s39_b). Marks by thread 0 around its token (notes/debug/
# s39_e_marks.patch): picked up (19), row[0] loaded (20: one logits load's latency), row_exp done
# (21), route_token done (22), token_norm done (23).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s39_e.sh
source notes/debug/call_env.sh s39_e
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
git apply notes/debug/s39_e_marks.patch >> "$LOG" 2>&1 || { echo "no apply" | tee -a "$LOG"; exit 1; }
phase_traces "Qwen3-30B-A3B 256" "DeepSeek-V3 256"
grep -E "^=====|router|routed|s39:|plan placed|dispatch part" "$LOG" | grep -v "^backward" | cut -c1-200 | head -40
printf '%s\n' "${summary[@]}"
