#!/usr/bin/env bash
# Session 22's first device call (~8 min): token dropping inside the forward's launch (784c034) and
# the MoEBackward router test at np 2 / 4 (fixed in 0c06191, never run past np 1), then the whole
# tests/gpu at np 1.   KOSMOS_COMMIT=<sha> bash notes/debug/s22_tests.sh
source notes/debug/call_env.sh s22_tests
T="-q -p no:cacheprovider --timeout=120 --timeout-method=thread -rfE --color=no"
DROP_FWD="tests/gpu/test_moe_forward.py -k routing_in_the_launch"
DROP_LAYER="tests/gpu/test_moe_layer.py -k capacity"
run "drop np1" timeout 200 python3 -m pytest tests/gpu/test_moe_route.py -k dropping $DROP_FWD $T
run "drop layer np1" timeout 200 python3 -m pytest $DROP_LAYER $T
run "drop np2" timeout 150 $MPIRUN -np 2 python3 -m mpi4py -m pytest $DROP_FWD $DROP_LAYER $T
run "router np2" timeout 100 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_backward_fused.py -k router $T
run "router+drop np4" timeout 150 $MPIRUN -np 4 python3 -m mpi4py -m pytest tests/gpu/test_moe_backward_fused.py -k router \
  $DROP_FWD $T
gpu_tests 1 260
grep -E "^=====|^(FAILED|ERROR) |passed|failed" "$LOG" | cut -c1-300 | tail -40
printf '%s\n' "${summary[@]}"
