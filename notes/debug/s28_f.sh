#!/usr/bin/env bash
# Session 28's sixth device call (<= 4 min), a diagnostic, never to keep: notes/patches/three_stages.patch
# caps the Hopper ring at 3 stages (kMaxStages 6 -> 3). Is the small-M grouped GEMM bound by the
# ring's bytes in flight (then 3 stages: B/A ~0.75-0.8 at 256 rows) or by what HBM gives its
# access pattern (then B/A ~0.95-1.0)? Both s28 attempts to put more in flight (prefetch_b) or
# earlier (b_first) did not gain.
#   KOSMOS_COMMIT=<sha>+three_stages bash notes/debug/s28_f.sh
source notes/debug/call_env.sh s28_f
patch_over_main notes/patches/three_stages.patch grouped.hip
run "grouped tests np1" timeout 120 python3 -m pytest tests/gpu/test_grouped.py -q -p no:cacheprovider -x
run "parts A/B" timeout 90 python3 bench/moe_gemm_parts.py --rows 256,2048 --tree-b /tmp/tree_main/hipsrc
grep -E "^=====|compiled|^(FAILED|ERROR) |passed|failed|B/A|rows/exp|Error|patch" "$LOG" | cut -c1-200 | tail -60
printf '%s\n' "${summary[@]}"
