#!/usr/bin/env bash
# Session 33 (<= 9.5 min, any card; the H200 for the bench's numbers): GPU tests of everything that
# calls matmul / grouped_matmul (session 32's untested cache commits; the new 128 x 224 and 128 x 160 tiles, dense
# and grouped, against the reference and bitwise against 256), bench/gemm.py on every shape of both
# sets with w224 and w160 forced beside the other widths (refits TILE_EFFICIENCY[224] and [160], interpolated at
# 0.985 and 0.90; the grouped quick set's choices do not change: not run), then s32_e's hit-rate
# check (host_profile.py with a device-path MoE training step holding its context to the backward).
# Prediction: w224 ~x1.12 over w256 on dsv3-gemm2-2048 (448 -> 512 tiles, 4 waves either way) and
# 70B-QKV-MBS1 TN; per-FLOP speed of 224 0.97-0.99 of 256 on shapes of > 1,000 tiles.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s33_b.sh
source notes/debug/call_env.sh s33_b
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 8 gemm.hip grouped.hip mx.hip transpose.hip moe_fused.hip moe_route.hip moe_dispatch.hip moe_combine.hip moe_backward.hip timing.hip symmetric.hip
run "gpu tests" timeout 240 python3 -m pytest tests/gpu/test_gemm.py tests/gpu/test_grouped.py tests/gpu/test_mx.py tests/gpu/test_interop.py tests/gpu/test_moe_layer.py tests/gpu/test_moe_forward.py -q -p no:cacheprovider -rfE
run "gemm both" timeout 220 python3 bench/gemm.py --set both --caps 132 --reps 10 --out $RUNS --tag s33_w224
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
run "host uncached" timeout 90 python3 notes/debug/host_profile.py --calls 200 --uncached
run "host cached" timeout 90 python3 notes/debug/host_profile.py --calls 200
grep -E "^=====|passed|failed|Error|host us per call|^  [a-zA-Z]|geomean|control|^(ag_tn|tn_rs|small|experts|square|odd)" "$LOG" | grep -v "^  File" | cut -c1-260 | tail -90
printf '%s\n' "${summary[@]}"
