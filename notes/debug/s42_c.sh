#!/usr/bin/env bash
# Branch route-split-sums (tree A, this tree) against main (B = A's hipsrc with
# notes/debug/s42_split.patch reversed): a row's max / exp-sum / score total split over the
# token's four lanes in a fixed order of four parts (was every lane the whole row, and the norm on
# one lane of four). Tests route + forward np 1 on A, the real-E traces A and B, then the share's
# forward A/B. Predicted (H100, real E): the routing step 22 -> 12-15 us (Qwen3-30B), 53 -> 35-45
# (DeepSeek-V3); the share within noise. ~3.5 min.
# Measured and not kept (notes/moe.md session 42); to rerun on main: git apply
# notes/patches/route_split_sums.patch && cp notes/patches/route_split_sums.patch notes/debug/s42_split.patch
#   KOSMOS_COMMIT=<sha> bash notes/debug/s42_c.sh
source notes/debug/call_env.sh s42_c
stamp() { echo "----- $(date +%T) $*" >> "$LOG"; }
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
stamp start
patch_under_tree notes/debug/s42_split.patch moe_fused_forward.hip moe_route.hip
stamp warmed
run "A: moe route/forward np1" timeout 120 python3 -m pytest tests/gpu/test_moe_route.py tests/gpu/test_moe_forward.py $T
stamp tested
real_e_traces AB
stamp traced
run "fwd A/B" timeout 60 python3 bench/moe.py --models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 10 --warmup 3 \
  --tree-b /tmp/tree_main/hipsrc --out $RUNS --tag s42c
cp "$RUNS"/moe*.json "$OUT"/ 2>/dev/null
stamp benched
grep -E "^=====|^-----|passed|failed|^(FAILED|ERROR) |rows/exp|fused|router|routed|plan placed|dispatch part|combine done|Error" "$LOG" \
  | grep -v "^  job" | cut -c1-200 | tail -60
printf '%s\n' "${summary[@]}"
