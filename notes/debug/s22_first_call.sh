#!/usr/bin/env bash
# Written at session 21's end for the next session's first device call (~8 min):
#   1. the MoEBackward router test at np 2 and 4 (fixed in 0c06191, never run past np 1);
#   2. A/B of the router phase, world 1: as built, the one-pass d w (notes/patches/router_one_pass.patch:
#      bitwise the same sums), and RW after SB in the builder call;
#   3. bench/moe.py --backward on this card (session 21's numbers are an H100's).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s22_first_call.sh
source notes/debug/call_env.sh s22a
T="-q -p no:cacheprovider --timeout=90 --timeout-method=thread -rfE --color=no -x"
run "router np2" timeout 100 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_moe_backward_fused.py -k router $T
run "router np4" timeout 120 $MPIRUN -np 4 python3 -m mpi4py -m pytest tests/gpu/test_moe_backward_fused.py -k router $T
M="--models DeepSeek-V3,Qwen3-30B-A3B --rows 2048"
run "as built" timeout 120 python3 notes/debug/router_bwd_ab.py $M
rm -rf /tmp/hs_op && cp -r hipsrc /tmp/hs_op && (cd /tmp/hs_op && git apply -p2 "$OLDPWD/notes/patches/router_one_pass.patch") \
  && echo "variant: one-pass d w" >> "$LOG"
KOSMOS_HIPSRC=/tmp/hs_op run "one-pass d w" timeout 120 python3 notes/debug/router_bwd_ab.py $M
rm -rf /tmp/hs_rw && cp -r hipsrc /tmp/hs_rw
python3 - /tmp/hs_rw/kosmos/moe/backward.h <<'PY'
import re, sys
s = open(sys.argv[1]).read()
s2 = re.sub(r"job_rw, job_rx, job_sa, job_sb, job_a,", "job_rx, job_sa, job_sb, job_rw, job_a,", s)
assert s2 != s
open(sys.argv[1], "w").write(s2)
print("variant: RW after SB")
PY
KOSMOS_HIPSRC=/tmp/hs_rw run "RW after SB" timeout 120 python3 notes/debug/router_bwd_ab.py $M
run "bench bwd" timeout 300 python3 bench/moe.py --backward --models DeepSeek-V3,Llama-4-Scout,Qwen3-30B-A3B \
  --rows 256,2048 --iters 10 --warmup 3 --out "$RUNS" --tag s22
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|^#|rows/exp|ms$|variant|fused backward" "$LOG" | cut -c1-160 | tail -40
grep -E "^(FAILED|ERROR) |passed|failed" "$LOG" | cut -c1-300 | head -10
printf '%s\n' "${summary[@]}"
