#!/usr/bin/env bash
# Session 34's one call left (<= 7 min, any card; branch pingpong = main + the ping-pong tiles):
# the ping-pong tiles' bitwise tests (dense and grouped) and their speed (contender "pp" beside the
# forced widths and stream-K on two short-K expert shapes, small M and square), and the fused backward's memo
# (d63c11b): its tests and host_profile.py's fused step before (--uncached-moe) and after.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s34_d.sh
source notes/debug/call_env.sh s34_d
# main holds the ping-pong tiles as notes/patches/pingpong.patch (branch pingpong has them applied)
apply_pingpong
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no"
run "warm" timeout 150 python3 -m kosmos.runtime.warm --jobs 8 gemm.hip grouped.hip moe_fused.hip moe_backward.hip records.hip moe_dispatch.hip moe_combine.hip moe_route.hip
run "pp gemm tests" timeout 60 python3 -m pytest tests/gpu/test_gemm.py -k "pingpong or agree_bitwise" $T
run "pp grouped tests" timeout 60 python3 -m pytest tests/gpu/test_grouped.py -k pingpong $T
run "bwd tests" timeout 80 python3 -m pytest tests/gpu/test_runtime.py tests/gpu/test_moe_backward_fused.py -k "device_record or memo or router or refuses_bad_arguments" $T
run "bench gemm" timeout 70 python3 bench/gemm.py --set other --shapes dsv3-gemm2-2048,gptoss-gemm1-2048,smallM-256,square-8192 --caps 132 --reps 10 --out $RUNS --tag s34_pp
run "host before" timeout 45 python3 notes/debug/host_profile.py --calls 150 --only "fused forward" --uncached-moe
run "host after" timeout 45 python3 notes/debug/host_profile.py --calls 150 --only "fused forward"
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|passed|failed|Error|^(small|experts|square)|^DeepSeek|^  MoELayer|^  the fused|host us" "$LOG" | cut -c1-330 | tail -45
printf '%s\n' "${summary[@]}"
