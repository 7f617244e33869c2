#!/usr/bin/env bash
# Session 13's first device call (~8 min): KOSMOS_COMMIT=<sha> bash notes/debug/bulk_call.sh
# The bulk-copy movers (KOSMOS_MOE_BULK_PUSH=1, hipsrc/kosmos/bulk_rows.h; written in session 12,
# never run): 1. correctness (bitwise the device path: MoE forward, backward, layer at np 1 and 2);
# 2. phase timelines with and without; 3. bench forward and backward with and without (separate
# processes: compare each run's fused/device ratio), movers 33 / 66 / 132.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KOSMOS_WAIT_BUDGET_S=10
export KOSMOS_COMMIT=${KOSMOS_COMMIT:-unknown}
OUT=${OUT:-/tmp/kosmos_bulk}; mkdir -p "$OUT"; LOG=$OUT/bulk.log
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none -x KOSMOS_COMMIT -x PYTHONPATH -x PYTHONUNBUFFERED -x KOSMOS_WAIT_BUDGET_S -x KOSMOS_HIPSRC"
source bench/suite_lib.sh
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no -x"
M="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 10 --warmup 3 --movers 33,66,132"
d=/tmp/hipsrc_bulk; rm -rf $d; cp -r hipsrc $d
sed -i "s/^#define KOSMOS_MOE_BULK_PUSH 0/#define KOSMOS_MOE_BULK_PUSH 1/" $d/kosmos/moe/experts.h
grep -q "KOSMOS_MOE_BULK_PUSH 1" $d/kosmos/moe/experts.h || echo "SED FAILED" >> "$LOG"
export KOSMOS_HIPSRC=$d
TESTS="tests/gpu/test_moe_forward.py tests/gpu/test_moe_backward_fused.py tests/gpu/test_moe_layer.py"
run "bulk tests np1" timeout 150 python3 -m mpi4py -m pytest $TESTS $T
run "bulk tests np2" timeout 200 $MPIRUN -np 2 python3 -m mpi4py -m pytest $TESTS $T
unset KOSMOS_HIPSRC
run "phases register" timeout 80 python3 notes/debug/phases.py --rows 2048
run "phases bulk" timeout 80 python3 notes/debug/phases.py --rows 2048 -D KOSMOS_MOE_BULK_PUSH=1
run "fwd register" timeout 150 python3 bench/moe.py $M --crew 0 --out "$OUT" --tag fwd_register
run "bwd register" timeout 150 python3 bench/moe.py --backward $M --out "$OUT" --tag bwd_register
export KOSMOS_HIPSRC=$d
run "fwd bulk" timeout 150 python3 bench/moe.py $M --crew 0 --out "$OUT" --tag fwd_bulk
run "bwd bulk" timeout 150 python3 bench/moe.py --backward $M --out "$OUT" --tag bwd_bulk
sed -n '/^===== phases/,/^===== fwd register/p' "$LOG" | grep -E "^=====|dispatch part|GEMM1|job A|combine done|builder call"
grep -E "^=====|rows/exp|fused" "$LOG" | grep -v "^===== phases" | cut -c1-330
grep -E "^(FAILED|ERROR) |passed|failed" "$LOG" | head
printf '%s\n' "${summary[@]}"
