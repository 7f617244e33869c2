#!/usr/bin/env bash
# s33_b.sh trimmed to <= 6 min for a short device budget: the GPU tests of the new tiles and of the
# MoE memo, bench/gemm.py on the seven shapes whose choice the new widths change and four controls,
# and one cached host profile.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s33_c.sh
source notes/debug/call_env.sh s33_c
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 8 gemm.hip grouped.hip moe_fused.hip moe_route.hip moe_dispatch.hip moe_combine.hip moe_backward.hip timing.hip symmetric.hip
run "gpu tests" timeout 200 python3 -m pytest tests/gpu/test_gemm.py tests/gpu/test_grouped.py tests/gpu/test_moe_forward.py tests/gpu/test_moe_layer.py -q -p no:cacheprovider -rfE
run "gemm changed" timeout 90 python3 bench/gemm.py --set both --shapes 70B-QKV-MBS1,70B-QKV-MBS2,70B-QKV-MBS4,8B-Down-MBS1,smallM-1000,dsv3-gemm2-2048,8B-QKV-MBS1,square-8192,dsv3-gemm1-2048 --caps 132 --reps 10 --out $RUNS --tag s33_changed
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
run "host cached" timeout 90 python3 notes/debug/host_profile.py --calls 200
grep -E "^=====|passed|failed|Error|host us per call|^  [a-zA-Z]|geomean|control|^(ag_|tn_rs|bulk_|small|experts|square|odd)" "$LOG" | grep -v "^  File" | cut -c1-260 | tail -70
printf '%s\n' "${summary[@]}"
