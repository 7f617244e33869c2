#!/usr/bin/env bash
# Session 28's fifth device call (<= 6 min): notes/patches/b_first.patch: the Hopper producer
# issues a stage's B boxes before A's. At few rows per group B (expert weights) is the HBM stream
# and A hits L2 (ncu, s28: DRAM reads = the weights' bytes + A once); the stage completes with its
# last box, so the slow ones first. Predicted (H100): moe_gemm_parts 256 rows B/A 1.01-1.04,
# 2,048 rows ~1.00; bench/gemm.py --quick within +-1 %.
#   KOSMOS_COMMIT=<sha>+b_first bash notes/debug/s28_e.sh
source notes/debug/call_env.sh s28_e
patch_over_main notes/patches/b_first.patch grouped.hip gemm.hip
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "gemm + grouped tests np1" timeout 120 python3 -m pytest tests/gpu/test_grouped.py tests/gpu/test_gemm.py $T
run "parts A/B" timeout 90 python3 bench/moe_gemm_parts.py --rows 256,2048 --tree-b /tmp/tree_main/hipsrc
run "grouped A/B" timeout 150 python3 bench/grouped_gemm.py --quick --iters 15 --tree-b /tmp/tree_main/hipsrc --out $RUNS
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|compiled|^(FAILED|ERROR) |passed|failed|B/A|rows/exp|Error|patch" "$LOG" | cut -c1-200 | tail -80
printf '%s\n' "${summary[@]}"
