#!/usr/bin/env bash
# The next session's first device call (notes/next.md), one command on the H200:
#   bash notes/debug/first_call.sh          (writes logs under $OUT; prints a summary last)
# 1. the whole suite at np 1 on the builder as committed; 2. MoEForward wired into path "fused"
# (notes/debug/wire_forward.patch) under 1,000 calls of hang.py and 500 of hang2.py (bitwise the
# device path); 3. if clean: its tests and the layer's at np 1 and 2, and bench/moe.py --quick.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KOSMOS_WAIT_BUDGET_S=10 KOSMOS_PYTEST_ARGS=--timeout-method=thread
export KOSMOS_COMMIT=${KOSMOS_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || cat .out/commit 2>/dev/null || echo unknown)}
OUT=${OUT:-/tmp/kosmos_first_call}; mkdir -p "$OUT"; LOG=$OUT/suite.log
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none -x KOSMOS_COMMIT -x PYTHONPATH -x PYTHONUNBUFFERED -x KOSMOS_WAIT_BUDGET_S"
source bench/suite_lib.sh
gpu_tests 1 200
patch -s -p1 < notes/debug/wire_forward.patch
ITERS=1000 WATCH=6 run "hang.py x1000" timeout 120 python3 notes/debug/hang.py both
ITERS=500 run "hang2.py x500 (fused = MoEForward, bitwise device)" timeout 90 python3 notes/debug/hang2.py
if grep -q "no hang, bitwise" "$LOG" && [ "$(grep -c '^no hang$' "$LOG")" -ge 1 ]; then
  T="-q -p no:cacheprovider --timeout=90 --timeout-method=thread -rfE --color=no"
  run "moe fwd+layer np1" timeout 150 python3 -m mpi4py -m pytest tests/gpu/test_moe_forward.py tests/gpu/test_moe_layer.py $T
  run "moe fwd+layer np2" timeout 200 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_forward.py tests/gpu/test_moe_layer.py $T
  run "bench moe quick" timeout 200 python3 bench/moe.py --quick --out "$OUT" --tag moeforward
  grep -E "rows/exp|fused m=" "$LOG" | tail -12
fi
grep -E "HANG|no hang" "$LOG"
printf '%s\n' "${summary[@]}"
