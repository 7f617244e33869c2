#!/usr/bin/env bash
# Session 30's last device call (<= 6 min): notes/debug/tma_ring.py (what the grouped GEMM's TMA
# ring streams alone, against plain loads), then s30_f.sh (kperm_batched.patch A/B + test_mx).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s30_g.sh
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kosmos_s30_g}; mkdir -p "$OUT"
(nvidia-smi --query-gpu=name --format=csv,noheader; timeout 90 python3 notes/debug/tma_ring.py) > "$OUT/tma_ring.log" 2>&1
tail -14 "$OUT/tma_ring.log"
KOSMOS_COMMIT=$KOSMOS_COMMIT+kperm_batched bash notes/debug/s30_f.sh
