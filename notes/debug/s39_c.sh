#!/usr/bin/env bash
# Session 39: the MoE expert GEMMs at 256 rows per expert by ncu (notes/debug/grouped_ncu.py):
# DRAM bytes and throughput of our grouped GEMM1 (SwiGLU) + GEMM2 against the weights' size, and
# cuBLAS's dense GEMMs of equal FLOPs. Predicted: DRAM read ~= the weights (the raster pairs an
# expert's two 128-row tiles on each weight block), DRAM throughput well below ~90 %.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s39_c.sh
source notes/debug/call_env.sh s39_c
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 2 grouped.hip gemm.hip
run "ncu grouped" timeout 300 ncu --clock-control none --profile-from-start off --section LaunchStats \
  --section SpeedOfLight --metrics dram__bytes_read.sum,dram__bytes_write.sum --csv --page details \
  --log-file "$OUT/ncu_grouped.log" python3 notes/debug/grouped_ncu.py
python3 notes/debug/grouped_ncu.py --summary "$OUT/ncu_grouped.log" > "$OUT/ncu_grouped_summary.txt" 2>&1
cat "$OUT/ncu_grouped_summary.txt" >> "$LOG"
tail -40 "$LOG" | cut -c1-400
printf '%s\n' "${summary[@]}"
