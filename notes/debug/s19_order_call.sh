#!/usr/bin/env bash
# Session 19: the forward phase timeline at DeepSeek-V3 2048 and the shared MLP job order A/B
# (as built: S1, GEMM1, GEMM2, S2; against S1, S2, GEMM1, GEMM2 via a patched copy of hipsrc).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s19_order_call.sh
source notes/debug/call_env.sh s19c
run "phases DeepSeek 2048" timeout 150 python3 notes/debug/phases.py --model DeepSeek-V3 --rows 2048
run "shared a/b (as built)" timeout 150 python3 notes/debug/shared_ab.py --models DeepSeek-V3
rm -rf /tmp/hs_order && cp -r hipsrc /tmp/hs_order
sed -i 's/job_s1, job1, job2, job_s2);/job_s1, job_s2, job1, job2);/' /tmp/hs_order/kosmos/moe/forward.h
grep -c "job_s1, job_s2, job1, job2" /tmp/hs_order/kosmos/moe/forward.h
KOSMOS_HIPSRC=/tmp/hs_order run "shared a/b (S2 before GEMM1)" timeout 150 python3 notes/debug/shared_ab.py --models DeepSeek-V3
grep -vE "^\s*$" "$LOG" | grep -vi warn | tail -60
