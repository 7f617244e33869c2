#!/usr/bin/env bash
# Session 25's last minutes of device time (<= 2.5 min): the forward patch's unit test only
# (notes/patches/forward_own_in_place.patch applied to the device's copy: the combine's own_runs
# table and the router's backward reading own rows through it, tests/gpu/test_moe_combine.py) at
# np 1, 2, 4 (oversubscribed: correctness only).   KOSMOS_COMMIT=<sha> bash notes/debug/s25_e.sh
source notes/debug/call_env.sh s25_e
git apply notes/patches/forward_own_in_place.patch >> "$LOG" 2>&1 || { echo "patch does not apply" | tee -a "$LOG"; exit 1; }
T="-q -p no:cacheprovider --timeout=100 --timeout-method=thread -rfE --color=no"
run "combine np1" timeout 100 python3 -m pytest tests/gpu/test_moe_combine.py $T
for n in 2 4; do
  run "combine np$n" timeout 40 $MPIRUN -np $n python3 -m mpi4py -m pytest tests/gpu/test_moe_combine.py $T
done
grep -E "^=====|^(FAILED|ERROR) |^E  |passed|failed|Error|patch" "$LOG" | cut -c1-240 | tail -40
printf '%s\n' "${summary[@]}"
