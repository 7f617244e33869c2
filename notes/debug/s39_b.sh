#!/usr/bin/env bash
# Session 39: is the launch's per-token routing bound by instruction fetch? The forward megakernel's
# code is 536 KB (kosmos_moe_forward .text on sm_90a), run once per launch in the routing: each
# line cold. Both routings (main's thread a token; route_warp_grid.patch's warp a token) take
# ~16 us at Qwen3-30B 256 for about one token per thread / warp, far above their arithmetic.
# Probe: each routing called twice in a row (idempotent: the same writes), phase marks around the
# second call. Predicted if fetch-bound: the second (warm) call << the first (e.g. 16 -> 2-4 us).
#   tree A = main + s39_twice_main.patch: 17 | call 1 | 19 | call 2 (18 inside) | 13
#   tree B = main + route_warp_grid + s39_twice_warp.patch: 17 | call 1 | 18, 19 | call 2 | 20
#   KOSMOS_COMMIT=<sha> bash notes/debug/s39_b.sh
source notes/debug/call_env.sh s39_b
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
which nvdisasm cuobjdump ncu >> "$LOG" 2>&1
rm -rf /tmp/treeA && mkdir -p /tmp/treeA && cp -r kosmos hipsrc bench notes /tmp/treeA/
(cd /tmp/treeA && git apply "$OLDPWD/notes/debug/s39_twice_main.patch") >> "$LOG" 2>&1 || { echo "A: no apply" | tee -a "$LOG"; exit 1; }
{ git apply notes/patches/route_warp_grid.patch && git apply notes/debug/s39_twice_warp.patch \
  && git apply --include=notes/debug/phases.py notes/debug/s39_twice_main.patch; } >> "$LOG" 2>&1 || { echo "B: no apply" | tee -a "$LOG"; exit 1; }
for c in "Qwen3-30B-A3B 256" "DeepSeek-V3 256" "Qwen3-30B-A3B 2048"; do
  set -- $c
  run "A $1 $2" timeout 150 env PYTHONPATH=/tmp/treeA KOSMOS_HIPSRC=/tmp/treeA/hipsrc python3 /tmp/treeA/notes/debug/phases.py --model "$1" --rows "$2" --movers 0
  run "B $1 $2" timeout 150 python3 notes/debug/phases.py --model "$1" --rows "$2" --movers 0
done
grep -E "^=====|router|routed|debug mark|plan placed" "$LOG" | grep -v "^backward" | cut -c1-200 | head -60
printf '%s\n' "${summary[@]}"
