#!/usr/bin/env bash
# One device call (~4 min): KOSMOS_COMMIT=<sha> [V2=<hipsrc dir>] bash notes/debug/rate_call.sh
# The movers' copy rate alone (bulk_rate.py, for the tree and a variant hipsrc), the fused kernels'
# phase timelines for movers x crew, and bench/moe.py's forward over the crew.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KOSMOS_COMMIT=${KOSMOS_COMMIT:-unknown}
OUT=${OUT:-/tmp/kosmos_rate}; mkdir -p "$OUT"; L=$OUT/rate.log; R=/tmp/kosmos_rate_runs; mkdir -p $R
{
  echo "== bulk rate: tree"; timeout 120 python3 notes/debug/bulk_rate.py
  if [ -n "${V2:-}" ]; then echo "== bulk rate: $V2"; KOSMOS_HIPSRC=$V2 timeout 120 python3 notes/debug/bulk_rate.py; fi
  echo "== phases"; timeout 150 python3 notes/debug/phases.py --rows 2048 --movers 33,66 --crew 0,33
  echo "== bench crew"
  timeout 200 python3 bench/moe.py --models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 10 --warmup 3 \
    --movers 33 --crew 0,16,33 --out $R --tag crew
  cp $R/*.json "$OUT"/
} > "$L" 2>&1
grep -E "^==|^(forward|backward):|dispatch part|GEMM1|GEMM2|job|push done|combine done|rows/exp|fused|Error|error" "$L" | cut -c1-200
