#!/usr/bin/env bash
# Session 20: the shared MLP's backward in the launch against beside it, and job orders (world 1).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s20_ab_call.sh
source notes/debug/call_env.sh s20ab
M="--models DeepSeek-V3,Llama-4-Scout --rows 2048"
run "as built (SA SB A B C D SC SD)" timeout 200 python3 notes/debug/shared_bwd_ab.py $M
variant() {  # variant NAME ORDER: the jobs in ORDER (a sed of backward.h's run_builder_jobs_beside call)
  rm -rf /tmp/hs_$1 && cp -r hipsrc /tmp/hs_$1
  python3 - /tmp/hs_$1/kosmos/moe/backward.h "$2" <<'PY'
import re, sys
p, order = sys.argv[1], sys.argv[2]
s = open(p).read()
new = "SideDispatch{d, side_pushes(movers)}, " + ", ".join("job_" + j for j in order.split())
s2 = re.sub(r"SideDispatch\{d, side_pushes\(movers\)\}, job_sa,[^;]*\)", new + ")", s, flags=re.S)
assert s2 != s
open(p, "w").write(s2)
PY
  KOSMOS_HIPSRC=/tmp/hs_$1 run "order $2" timeout 200 python3 notes/debug/shared_bwd_ab.py $M
}
variant routed_first "a b sa sb c d sc sd"
variant sc_early "sa sb a b c sc d sd"
grep -vE "^\s*$" "$LOG" | grep -vi warn | grep -v "^#" | tail -40
printf '%s\n' "${summary[@]}"
