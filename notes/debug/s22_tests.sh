#!/usr/bin/env bash
# Session 22's first device call (~8 min): token dropping inside the forward's launch (784c034) and
# the MoEBackward router test at np 2 / 4 (fixed in 0c06191, never run past np 1); the MoE test
# files whole at np 1.   KOSMOS_COMMIT=<sha> bash notes/debug/s22_tests.sh
source notes/debug/call_env.sh s22_tests
T="-q -p no:cacheprovider --timeout=120 --timeout-method=thread -rfE --color=no"
F=tests/gpu/test_moe_forward.py L=tests/gpu/test_moe_layer.py B=tests/gpu/test_moe_backward_fused.py
run "moe np1" timeout 300 python3 -m pytest tests/gpu/test_moe_route.py $F $L $B $T
run "drop np2" timeout 150 $MPIRUN -np 2 python3 -m mpi4py -m pytest $F $L -k "routing_in_the_launch or capacity" $T
run "router np2" timeout 100 $MPIRUN -np 2 python3 -m mpi4py -m pytest $B -k router $T
run "router+drop np4" timeout 150 $MPIRUN -np 4 python3 -m mpi4py -m pytest $B $F -k "router or routing_in_the_launch" $T
grep -E "^=====|^(FAILED|ERROR) |passed|failed" "$LOG" | cut -c1-300 | tail -40
printf '%s\n' "${summary[@]}"
