#!/usr/bin/env bash
# Session 44's last call (~2 min): the MXFP8 late-rank test at np 1 and 2, then the two gaps left in
# the world-1 MXFP8 table, bf16 beside mxfp8 on the same shapes (is the bulk op's gap the kernel's?).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s44_e.sh
source notes/debug/call_env.sh s44_e
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "late np1" timeout 100 python3 -m pytest tests/gpu/test_tp_mx.py -k late $T
run "late np2" timeout 100 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_tp_mx.py -k late $T
S=70B-QKV-MBS2,405B-QKV-MBS1,70B-QKV-MBS8,8B-OProj-MBS4
for p in bf16 mxfp8; do
  run "bench $p" timeout 100 python3 bench/tp.py --precision $p --kernels bulk_ag_nn,ag_nn --shapes $S --iters 15 --out $RUNS/$p
done
grep -E "^=====|passed|failed|^(bulk_ag_nn|ag_nn) " "$LOG" | cut -c1-150
printf '%s\n' "${summary[@]}"
