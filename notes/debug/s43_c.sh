#!/usr/bin/env bash
# Is the routing's top-k step (s43_a: ~10 us of thread 0's token even at the share's E 16, 15 us at
# Qwen3-30B's real E 128) the instruction cache? The forward kernel is ~40 K instructions (640 KB);
# the routing's code runs once a call. Tree T (notes/patches/route_twice.patch): one copy of
# route_token_lanes run twice, the second marked (warm code); tree R (merge_rolled.patch): the lane
# merge's rounds rolled (one round's code run log2 L times). Phase traces at the share and real E.
# Then the column-band dequantize's fix (tests, A/B) and the MoE route + forward tests on the
# 16-byte staging. ~6 min.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s43_c.sh
source notes/debug/call_env.sh s43_c
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
# this tree (A): the staging's 16-byte loads (s43_a had 4-byte ones: staging 3.8 / 10.2 us at real E)
real_e_traces
for t in twice:route_twice merge:merge_rolled; do
  name=${t%%:*} patch=${t#*:}
  rm -rf /tmp/tree_$name && mkdir -p /tmp/tree_$name && cp -r hipsrc /tmp/tree_$name/
  (cd /tmp/tree_$name && patch -p1 -s < "$OLDPWD/notes/patches/$patch.patch") >> "$LOG" 2>&1
  run "phases $name Qwen3-30B-A3B share" env KOSMOS_HIPSRC=/tmp/tree_$name/hipsrc timeout 90 python3 notes/debug/phases.py \
    --model Qwen3-30B-A3B --rows 256 --movers 0 --forward-only
  for m in Qwen3-30B-A3B DeepSeek-V3; do
    run "phases $name $m ranks 8" env KOSMOS_HIPSRC=/tmp/tree_$name/hipsrc timeout 60 python3 notes/debug/phases.py \
      --model $m --rows 256 --movers 0 --ranks 8 --forward-only
  done
done
# the column-band dequantize without its u64 divisions (the s43_b A/B had it 15-35 % slower on
# column blocks): tests and the A/B again against the tree before 3eb7a57
patch_under_tree notes/patches/dequant_col_bands.patch mx.hip tp.hip
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "mx np1" timeout 200 python3 -m pytest tests/gpu/test_mx.py tests/gpu/test_tp_mx.py $T
run "moe route+forward np1" timeout 200 python3 -m pytest tests/gpu/test_moe_route.py tests/gpu/test_moe_forward.py $T
run "dequant A/B" timeout 120 python3 notes/debug/dequant_ab.py --tree-b /tmp/tree_main/hipsrc
grep -E "^=====|staged|thread 0|routed \+|plan placed|dispatch part|Error" "$LOG" | cut -c1-200 | tail -60
grep -E "B/A|bitwise|passed|failed" "$LOG" | tail -16
printf '%s\n' "${summary[@]}"
