#!/usr/bin/env bash
# Session 28's seventh device call (<= 8 min): notes/patches/five_stages.patch: the stages and the
# TMA-store epilogue's staging share one region, as many stages as leave one 8 KB slot per
# consumer warpgroup: the 192-wide tile (and MXFP8-A's 256-wide) get a 5th stage and one staging
# slot instead of two; 256 and 128 unchanged. Why: three_stages (s28_f) said a 4th stage is worth
# 5-12 % at small M. Predicted (H100): n192 kernels at small M B/A 1.02-1.05 (Qwen3-30B fwd1 at
# 256 rows), others ~1.00; bench/gemm.py --quick bf16 B/A >= 1.00 (its n192 choices), mxfp8 B/A ~1.00-1.02.
#   KOSMOS_COMMIT=<sha>+five_stages bash notes/debug/s28_g.sh
source notes/debug/call_env.sh s28_g
patch_over_main notes/patches/five_stages.patch grouped.hip gemm.hip mx.hip
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "gemm grouped mx tests np1" timeout 150 python3 -m pytest tests/gpu/test_gemm.py tests/gpu/test_grouped.py tests/gpu/test_mx.py $T
run "parts A/B" timeout 90 python3 bench/moe_gemm_parts.py --rows 256,2048 --tree-b /tmp/tree_main/hipsrc
run "grouped A/B" timeout 120 python3 bench/grouped_gemm.py --quick --iters 15 --tree-b /tmp/tree_main/hipsrc --out $RUNS
run "gemm A/B" timeout 200 python3 bench/gemm.py --quick --precision mxfp8 --caps 132 --reps 12 --tree-b /tmp/tree_main/hipsrc --out $RUNS --tag s28_five
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|compiled|^(FAILED|ERROR) |passed|failed|B/A|rows/exp|Error|patch|^layout|geomean" "$LOG" | cut -c1-200 | tail -90
printf '%s\n' "${summary[@]}"
