#!/usr/bin/env bash
# Session 17's first call: the MXFP8-A conversion variants (checks + timing, world 1) and the TP tests
# at np 2 that session 16 owed after the Problem change (oversubscribed: correctness only).
# (notes/debug/mx_variants.py and its KOSMOS_MX_VARIANT switch live at 12a1d45 only: git checkout 12a1d45 to rerun.)
# KOSMOS_COMMIT=<sha> bash notes/debug/s17_call.sh
source notes/debug/call_env.sh s17
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "mx variants" timeout 330 python3 notes/debug/mx_variants.py
run "tp tests np2" timeout 220 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_tp.py tests/gpu/test_tp_mx.py $T
grep -E "^(FAILED|ERROR) |passed|failed|Error|^check|^layout|^(TN|NN) |PASSED" "$LOG" | head -60
printf '%s\n' "${summary[@]}"
