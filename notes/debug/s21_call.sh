#!/usr/bin/env bash
# Session 21: the review fixes of MoEBackward (shared record after the join, extra checks) and the
# new tests; then (mode 2) the session-20 leftovers: np 2 backward + layer tests and the wgrad1
# before dgrad1 A/B (world 1, DeepSeek-V3 2,048 rows/exp).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s21_call.sh 1|2
source notes/debug/call_env.sh s21_$1
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
if [ "$1" = 1 ]; then
  run "np1 record+bwd+fwd" timeout 300 python3 -m mpi4py -m pytest tests/gpu/test_runtime.py \
    tests/gpu/test_moe_backward_fused.py tests/gpu/test_moe_forward.py $T
  run "np4 shared/refuses" timeout 240 $MPIRUN -np 4 python3 -m mpi4py -m pytest tests/gpu/test_moe_backward_fused.py \
    -k "shared or refuses" $T
else
  run "np2 bwd+layer" timeout 360 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_backward_fused.py \
    tests/gpu/test_moe_layer.py $T
  M="--models DeepSeek-V3 --rows 2048"
  run "as built" timeout 100 python3 notes/debug/shared_bwd_ab.py $M
  rm -rf /tmp/hs_dc && cp -r hipsrc /tmp/hs_dc
  python3 - /tmp/hs_dc/kosmos/moe/backward.h <<'PY'
import re, sys
s = open(sys.argv[1]).read()
s2 = re.sub(r"job_a, job_b, job_c,\s*job_d, job_sc, job_sd\)", "job_a, job_b, job_d, job_c, job_sc, job_sd)", s)
assert s2 != s
open(sys.argv[1], "w").write(s2)
print("variant: job_d before job_c")
PY
  KOSMOS_HIPSRC=/tmp/hs_dc run "wgrad1 before dgrad1" timeout 100 python3 notes/debug/shared_bwd_ab.py $M
fi
grep -vE "^\s*$" "$LOG" | grep -vi warn | grep -E "^=====|ms$|^[0-9]|variant" | cut -c1-200 | tail -16
grep -E "^(FAILED|ERROR) |passed|failed" "$LOG" | cut -c1-400 | head -20
printf '%s\n' "${summary[@]}"
