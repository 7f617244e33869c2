#!/usr/bin/env bash
# Session 31's first device call (<= 8 min, any card; written in session 30, never run):
# 1. notes/debug/tma_ring.py: TMA rings vs plain loads on 4 KB rows (rerun), then the grouped GEMM
#    (Qwen3-30B fwd1, 256 and 2,048 rows per expert) beside tma_units, its own load stream alone.
# 2. notes/debug/tile_trace.py: per-CTA unit timelines of the small-M grouped GEMMs and their
#    speed at every tile width.
# 3. notes/debug/s30_h.sh: mx_bconv_diag.patch (can the MXFP8-A consumers convert B themselves?).
# What to read in each: notes/next.md (session 30's plan).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s31_a.sh
source notes/debug/call_env.sh s31_a
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm grouped" timeout 120 python3 -m kosmos.runtime.warm --jobs 1 grouped.hip
run "tma ring" timeout 120 python3 notes/debug/tma_ring.py
for a in "--rows 256 --widths" "--rows 256 --part fwd2 --widths" "--rows 256 --model DeepSeek-V3" "--rows 2048"; do
  run "tile trace $a" timeout 90 python3 notes/debug/tile_trace.py $a
done
grep -vE "^compiling|^ok " "$LOG" | cut -c1-220 | tail -60
printf '%s\n' "${summary[@]}"
bash notes/debug/s30_h.sh
