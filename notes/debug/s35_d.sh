#!/usr/bin/env bash
# s35_c.sh cut to <= 5.5 min (any card): the new MoE tests of main's GPU-untested code, then the
# ping-pong patch's tests and speed (issue 11); no host profile, no warm of the patched tree.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s35_d.sh
source notes/debug/call_env.sh s35_d
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no"
MODS="gemm.hip grouped.hip moe_fused.hip moe_backward.hip records.hip moe_dispatch.hip moe_combine.hip moe_route.hip"
run "warm" timeout 90 python3 -m kosmos.runtime.warm --jobs 8 $MODS
run "moe new tests" timeout -s INT 100 python3 -m pytest tests/gpu/test_moe_backward_fused.py tests/gpu/test_moe_layer.py tests/gpu/test_runtime.py -k "callers_buffers or memo or refuses or device_record or memory or fused_is_bitwise" $T
git apply notes/patches/pingpong.patch >> "$LOG" 2>&1 || echo "pingpong.patch does not apply" >> "$LOG"
run "pp tests" timeout 100 python3 -m pytest tests/gpu/test_gemm.py tests/gpu/test_grouped.py -k "pingpong or agree_bitwise" $T
run "bench gemm" timeout 50 python3 bench/gemm.py --set other --shapes dsv3-gemm2-2048,gptoss-gemm1-2048,smallM-256,square-8192 --caps 132 --reps 8 --out $RUNS --tag s35_pp
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|passed|failed|Error|^(small|experts|square)|^  MoELayer|host us|^step|loss" "$LOG" | cut -c1-300 | tail -45
printf '%s\n' "${summary[@]}"
