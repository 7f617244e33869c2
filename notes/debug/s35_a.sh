#!/usr/bin/env bash
# Session 35's one-call plan when device time is short (any card), cut to the time left:
#   full  (<= 9.5 min): the new MoE tests of main's GPU-untested code (memo, out=, held router copy,
#         DeviceRecord puts), the fused step's host time, the training example, the rest of the MoE
#         tests, then the ping-pong patch's tests and speed (issue 11; last: a cut call loses it first);
#   short (<= 7 min): no example, no rest;  minimal (<= 5.5 min): also no host profile, no warm of
#         the patched tree. s34_d.sh + s35_b.sh do all of it and more in two calls.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s35_a.sh [full|short|minimal]
MODE=${1:-full}
source notes/debug/call_env.sh s35_a
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no"
MODS="gemm.hip grouped.hip moe_fused.hip moe_backward.hip records.hip moe_dispatch.hip moe_combine.hip moe_route.hip"
NEW="callers_buffers or memo or refuses or device_record or memory or fused_is_bitwise or capacity"
run "warm" timeout 90 python3 -m kosmos.runtime.warm --jobs 8 $MODS
run "moe new tests" timeout -s INT 100 python3 -m pytest tests/gpu/test_moe_backward_fused.py tests/gpu/test_moe_layer.py tests/gpu/test_runtime.py -k "$NEW" $T
[ "$MODE" != minimal ] && run "host (main)" timeout 35 python3 notes/debug/host_profile.py --calls 120 --only "fused forward"
[ "$MODE" = full ] && run "moe_train np1" timeout 40 python3 launch/examples/moe_train.py --steps 30 --log 10
# SIGINT: pytest reports a cut run
[ "$MODE" = full ] && run "moe rest" timeout -s INT 90 python3 -m pytest tests/gpu/test_moe_backward_fused.py tests/gpu/test_moe_layer.py -k "not ($NEW)" $T
git apply notes/patches/pingpong.patch >> "$LOG" 2>&1 || echo "pingpong.patch does not apply" >> "$LOG"
[ "$MODE" != minimal ] && run "warm pp" timeout 60 python3 -m kosmos.runtime.warm --jobs 2 gemm.hip grouped.hip
run "pp tests" timeout 100 python3 -m pytest tests/gpu/test_gemm.py tests/gpu/test_grouped.py -k "pingpong or agree_bitwise" $T
run "bench gemm" timeout 50 python3 bench/gemm.py --set other --shapes dsv3-gemm2-2048,gptoss-gemm1-2048,smallM-256,square-8192 --caps 132 --reps 8 --out $RUNS --tag s35_pp
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|passed|failed|Error|^(small|experts|square)|^  MoELayer|host us|^step|loss" "$LOG" | cut -c1-300 | tail -45
printf '%s\n' "${summary[@]}"
