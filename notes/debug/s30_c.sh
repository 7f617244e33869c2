#!/usr/bin/env bash
# Session 30's third device call (<= 5 min), two diagnostics, never to keep, on the small-M grouped
# GEMMs (fwd1 at 256 rows per expert streams weights at ~2.2 TB/s, session 28's ncu; a plain
# stream reaches 3.07, session 29's hbm_pattern.py):
# 1. notes/patches/no_mma.patch: every bf16 consumer takes the idle path (each stage released as it
#    lands, no wgmma; outputs wrong): the TMA stream alone, same ring, boxes and schedule. If it is
#    about as slow (B/A ~1.0-1.15), the load pattern is the ceiling; if it nears 3 TB/s (B/A
#    ~1.3-1.4), the coupling of loads to the MMA and the stage release is.
# 2. notes/patches/wait0.patch: wgmma_wait<0> and the stage released at once, instead of wait<1>
#    and the previous stage released: in the memory-bound regime a consumer then holds no stage
#    while it waits for the next, one more stage of four in flight. Predicted B/A 1.03-1.08 at 256
#    rows, <= 1.0 at 2,048 (the MMAs no longer back to back). If it pays at 256, the next step is
#    a per-kernel choice (the grouped kernels' small-M units).
#   KOSMOS_COMMIT=<sha>+diag bash notes/debug/s30_c.sh
source notes/debug/call_env.sh s30_c
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
rm -rf /tmp/tree_main && mkdir -p /tmp/tree_main && cp -r hipsrc /tmp/tree_main/
KOSMOS_HIPSRC=/tmp/tree_main/hipsrc run "warm B" timeout 200 python3 -m kosmos.runtime.warm --jobs 1 grouped.hip
for p in no_mma wait0; do
  rm -rf hipsrc && cp -r /tmp/tree_main/hipsrc . && git apply notes/patches/$p.patch >> "$LOG" 2>&1 || { echo "$p does not apply" | tee -a "$LOG"; continue; }
  run "warm $p" timeout 200 python3 -m kosmos.runtime.warm --jobs 1 grouped.hip
  run "$p parts A/B" timeout 120 python3 bench/moe_gemm_parts.py --rows 256,2048 --tree-b /tmp/tree_main/hipsrc
done
rm -rf hipsrc && cp -r /tmp/tree_main/hipsrc .
grep -E "^=====|compiled|^(FAILED|ERROR) |passed|failed|B/A|rows/exp|Error|patch" "$LOG" | cut -c1-200 | tail -60
printf '%s\n' "${summary[@]}"
