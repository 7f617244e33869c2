#!/usr/bin/env bash
# Session 43's last call, most needed first (the device time left is ~5 minutes): (1) the
# column-band dequantize without its u64 divisions (1979b11; s43_b had the band loop 15-35 % slower
# on column blocks): test_mx + test_tp_mx np 1 and the dequantize A/B against the tree before
# 3eb7a57; (2) test_moe_route + test_moe_forward np 1 on the 16-byte staging (889ad0c); (3) is
# the routing's top-k (s43_a: ~10 us of thread 0's token even at the share's E 16) the instruction
# cache? Tree T (notes/patches/route_twice.patch): one copy of route_token_lanes run twice, the
# second marked (its code warm) -- run after (4) this tree's real-E traces (the 16-byte staging:
# s43_a had 3.8 / 10.2 us of staging at Qwen3-30B / DeepSeek-V3). merge_rolled.patch (the lane
# merge's rounds rolled) waits for (3)'s answer.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s43_c.sh
source notes/debug/call_env.sh s43_c
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
patch_under_tree notes/patches/dequant_col_bands.patch mx.hip tp.hip
run "mx np1" timeout 100 python3 -m pytest tests/gpu/test_mx.py tests/gpu/test_tp_mx.py $T
run "dequant A/B" timeout 60 python3 notes/debug/dequant_ab.py --tree-b /tmp/tree_main/hipsrc --iters 20
run "moe route+forward np1" timeout 150 python3 -m pytest tests/gpu/test_moe_route.py tests/gpu/test_moe_forward.py $T
real_e_traces
rm -rf /tmp/tree_twice && mkdir -p /tmp/tree_twice && cp -r hipsrc /tmp/tree_twice/
(cd /tmp/tree_twice && patch -p1 -s < "$OLDPWD/notes/patches/route_twice.patch") >> "$LOG" 2>&1
for a in "--forward-only" "--ranks 8 --forward-only"; do
  run "phases twice Qwen3-30B $a" env KOSMOS_HIPSRC=/tmp/tree_twice/hipsrc timeout 90 python3 notes/debug/phases.py \
    --model Qwen3-30B-A3B --rows 256 --movers 0 $a
done
grep -E "^=====|staged|thread 0|routed \+|plan placed|Error" "$LOG" | cut -c1-200 | tail -40
grep -E "B/A|bitwise|passed|failed" "$LOG" | tail -16
printf '%s\n' "${summary[@]}"
