#!/usr/bin/env bash
# A/B of notes/patches/grid_first_claim.patch (<= 5 min, any card; written in session 31, never
# run): the standalone plain and grouped GEMMs take their first unit as blockIdx.x instead of
# from the atomic queue, so no L2 round trip precedes the first loads. Prediction: -0.5..-1 us a
# launch, i.e. B/A time 1.01-1.03 on the 36-60 us grouped GEMMs at 256 rows and the small dense
# shapes, ~1.00 elsewhere (launch_floor.py, s32_a, says how much of a launch is fixed). Tests:
# tests/gpu/test_gemm.py and test_grouped.py with the patch.
#   KOSMOS_COMMIT=<sha>+grid_first_claim bash notes/debug/s32_b.sh
source notes/debug/call_env.sh s32_b
patch_over_main notes/patches/grid_first_claim.patch gemm.hip grouped.hip
run "tests" timeout 200 python3 -m pytest tests/gpu/test_gemm.py tests/gpu/test_grouped.py -q -p no:cacheprovider
run "grouped A/B" timeout 120 python3 bench/grouped_gemm.py --quick --tree-b /tmp/tree_main/hipsrc --out $RUNS
run "gemm A/B" timeout 150 python3 bench/gemm.py --quick --set both --caps 132 --reps 15 --tree-b /tmp/tree_main/hipsrc --out $RUNS --tag s32_first_claim
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|passed|failed|B/A|control|Error|patch" "$LOG" | cut -c1-260 | tail -60
printf '%s\n' "${summary[@]}"
