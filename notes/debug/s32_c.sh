#!/usr/bin/env bash
# Session 32's main-as-committed call (<= 9 min; meant for an H200, issue 11's and 14's target card,
# not measured since session 17): launch_floor.py (device and host cost of a launch), host_profile.py
# (where each call's host time goes), bench/grouped_gemm.py --quick, and bench/gemm.py --set paper
# --precision mxfp8 under session 31's fixed protocol (read the "control" line first).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s32_c.sh
source notes/debug/call_env.sh s32_c
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 8 gemm.hip mx.hip transpose.hip grouped.hip moe_fused.hip moe_route.hip moe_dispatch.hip moe_combine.hip timing.hip symmetric.hip
run "launch floor" timeout 60 python3 notes/debug/launch_floor.py
run "host profile" timeout 150 python3 notes/debug/host_profile.py --profile
run "grouped quick" timeout 100 python3 bench/grouped_gemm.py --quick --out $RUNS
run "gemm paper mx" timeout 240 python3 bench/gemm.py --set paper --precision mxfp8 --caps 132 --reps 12 --out $RUNS --tag s32_paper_mx
run "gemm other" timeout 100 python3 bench/gemm.py --set other --caps 132 --reps 15 --out $RUNS --tag s32_other
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -vE "^compiling|^ok " "$LOG" | grep -vE "^(ag_|tn_rs|bulk_)" | grep -vE "^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ " | cut -c1-300 | tail -60
printf '%s\n' "${summary[@]}"
