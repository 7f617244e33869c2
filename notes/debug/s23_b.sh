#!/usr/bin/env bash
# Session 23's second device call (~8 min): the whole tests/gpu at np 1 (last full pass: session 19)
# and the one-pass d w router patch A/B (notes/patches/router_one_pass.patch; never measured: its
# compile needs ~100 s).   KOSMOS_COMMIT=<sha> bash notes/debug/s23_b.sh
source notes/debug/call_env.sh s23_b
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no"
run "gpu np1" timeout 330 python3 -m pytest tests/gpu $T
M="--models DeepSeek-V3,Qwen3-30B-A3B --rows 2048"
rm -rf /tmp/hs_op && cp -r hipsrc /tmp/hs_op && (cd /tmp/hs_op && git apply -p2 "$OLDPWD/notes/patches/router_one_pass.patch") \
  && echo "variant: one-pass d w" >> "$LOG"
KOSMOS_HIPSRC=/tmp/hs_op run "one-pass d w" timeout 200 python3 notes/debug/router_bwd_ab.py $M
run "as built" timeout 100 python3 notes/debug/router_bwd_ab.py $M
grep -E "^=====|^(FAILED|ERROR) |passed|failed|variant|ms|DeepSeek|Qwen" "$LOG" | cut -c1-220 | tail -50
printf '%s\n' "${summary[@]}"
