#!/usr/bin/env bash
# Session 12's phase timelines (~2 min): bash notes/debug/call4.sh
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KOSMOS_WAIT_BUDGET_S=10
OUT=${OUT:-/tmp/kosmos_call4}; mkdir -p "$OUT"
for a in "--rows 2048" "--rows 2048 --crew 0" "--rows 256"; do
  echo "===== phases Qwen3-30B-A3B $a"; timeout 80 python3 notes/debug/phases.py --model Qwen3-30B-A3B $a
done 2>&1 | tee "$OUT/phases.log"
