#!/usr/bin/env bash
# Where the routing step's ~20 us (Qwen3-30B) / ~53 us (DeepSeek-V3) go at the router's real E
# (phases.py --ranks 8), with the round's inner slots (a8cdb77: rows staged; thread 0's token: row
# max + exp-sum, top-k, norm + stores), again with eight lanes a token (-D KOSMOS_ROUTE_LANES=8: at
# real E a CTA routes one chunk, 4 of its 12 warps; session 41 measured 1 -> 4 lanes 39 -> 21 us at
# Qwen3-30B, ~0.19 us an offer a lane), and the same at the bench's share (E 16 / 32). Also the
# first GPU run of cd37592 (the TP stream-K kernel's claim back to queue order): test_tp np 1. Last, real
# E with the offer loops unrolled by 4 (notes/patches/route_offer_unroll.patch). ~3 min.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s43_a.sh
source notes/debug/call_env.sh s43_a
stamp() { echo "----- $(date +%T) $*" >> "$LOG"; }
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
stamp start
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 4 tp.hip gemm.hip timing.hip moe_route.hip
run "tp np1" timeout 100 python3 -m pytest tests/gpu/test_tp.py $T
stamp tested
real_e_traces
for m in Qwen3-30B-A3B DeepSeek-V3; do
  run "phases A $m 256 ranks 8 lanes 8" timeout 60 python3 notes/debug/phases.py --model $m --rows 256 --movers 0 \
    --ranks 8 --forward-only -D KOSMOS_ROUTE_LANES=8
  run "phases share $m 256" timeout 60 python3 notes/debug/phases.py --model $m --rows 256 --movers 0 --forward-only
done
# the offer loops unrolled by 4 (notes/patches/route_offer_unroll.patch: the next offers' loads and
# expf issue under the last offer's select chain), four lanes, real E
rm -rf /tmp/tree_unroll && mkdir -p /tmp/tree_unroll && cp -r hipsrc /tmp/tree_unroll/
(cd /tmp/tree_unroll && patch -p1 -s < "$OLDPWD/notes/patches/route_offer_unroll.patch") >> "$LOG" 2>&1
for m in Qwen3-30B-A3B DeepSeek-V3; do
  run "phases U $m 256 ranks 8 unroll 4" env KOSMOS_HIPSRC=/tmp/tree_unroll/hipsrc timeout 60 python3 notes/debug/phases.py \
    --model $m --rows 256 --movers 0 --ranks 8 --forward-only
done
stamp traced
grep -E "^=====|^-----|passed|failed|^(FAILED|ERROR) |router|routed|thread 0|staged|plan placed|dispatch part|Error" "$LOG" \
  | grep -v "^  job" | cut -c1-200 | tail -60
printf '%s\n' "${summary[@]}"
