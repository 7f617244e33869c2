#!/usr/bin/env bash
# Session 39: where one token's ~16-19 us goes in the launch's routing (main's one-thread form;
# at Qwen3-30B's EP-8 share the rule is over 16 experts, top-8: far too long for its arithmetic,
# and not instruction fetch: s39_b). Marks by thread 0 around its token (notes/debug/
# s39_e_marks.patch): picked up (19), row[0] loaded (20: one logits load's latency), row_exp done
# (21), route_token done (22), token_norm done (23); and the count exchange's steps ("plan placed"
# -> "dispatch part done", ~14-18 us): entered (24), CTA 0 published (27), counts seen (25), counts
# loaded (26). (Slots 24-27 are the backward's SA..B job slots too: its table is not to be read.)
#   KOSMOS_COMMIT=<sha> bash notes/debug/s39_e.sh
# First main's fused forward and backward tests at np 1: the first GPU check of aad87d5 (the fused
# kernels split into a file each).
source notes/debug/call_env.sh s39_e
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 10 moe_fused_forward.hip moe_fused_backward_f32.hip \
  moe_fused_backward_bf16.hip moe_route.hip moe_backward.hip grouped.hip gemm.hip moe_dispatch.hip moe_combine.hip records.hip
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "moe forward/backward np1" timeout 240 python3 -m pytest tests/gpu/test_moe_forward.py tests/gpu/test_moe_backward_fused.py $T
git apply notes/debug/s39_e_marks.patch >> "$LOG" 2>&1 || { echo "no apply" | tee -a "$LOG"; exit 1; }
phase_traces "Qwen3-30B-A3B 256" "DeepSeek-V3 256"
grep -E "^=====|passed|failed|^(FAILED|ERROR) |router|routed|s39:|plan placed|dispatch part" "$LOG" | grep -v "^backward" | cut -c1-200 | head -40
printf '%s\n' "${summary[@]}"
