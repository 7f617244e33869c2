#!/usr/bin/env bash
# Session 30's third device call (<= 3 min), a diagnostic, never to keep: notes/patches/no_mma.patch
# makes every bf16 consumer take the idle path (each stage released as it lands, no wgmma; outputs
# wrong). It times the grouped GEMMs' TMA stream alone, with the same ring, boxes and schedule.
# Question: at 256 rows per expert (fwd1 ~2.2 TB/s, session 28's ncu) is the ceiling the load
# pattern (then no_mma about as slow: B/A ~1.0-1.15) or the coupling of loads to the MMA and
# the stage release (then no_mma near a plain stream's 3.07 TB/s: B/A ~1.3-1.4)?
#   KOSMOS_COMMIT=<sha>+no_mma bash notes/debug/s30_c.sh
source notes/debug/call_env.sh s30_c
patch_over_main notes/patches/no_mma.patch grouped.hip
run "parts A/B" timeout 120 python3 bench/moe_gemm_parts.py --rows 256,2048 --tree-b /tmp/tree_main/hipsrc
grep -E "^=====|compiled|^(FAILED|ERROR) |passed|failed|B/A|rows/exp|Error|patch" "$LOG" | cut -c1-200 | tail -40
printf '%s\n' "${summary[@]}"
