#!/usr/bin/env bash
# Session 36's check of the ping-pong 128 as the 128-wide bf16 tile (notes/patches/pingpong128.patch
# = commit 021ecbe, branch pingpong-128; reverted on main until this passes: every kernel recompiles
# with its builder_wgmma.h) and of out='s checks memo (9bfe395, on main): the GEMM and grouped GPU
# tests, the MoE tests of the memos, then TP and MXFP8 at world 1 (the
# cooperative tiles they keep went through the builder's refactor). (Session 37 dropped its two host
# profiles: device time was short; they are in s37_b.sh's tail.)
#   KOSMOS_COMMIT=<sha> bash notes/debug/s36_d.sh
source notes/debug/call_env.sh s36_d
apply_pingpong notes/patches/pingpong128.patch
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no -x"
run "warm" timeout 170 python3 -m kosmos.runtime.warm --jobs 12 gemm.hip grouped.hip tp.hip moe_fused.hip moe_backward.hip records.hip moe_dispatch.hip moe_combine.hip moe_route.hip mx.hip transpose.hip
run "gemm+grouped" timeout -s INT 80 python3 -m pytest tests/gpu/test_gemm.py tests/gpu/test_grouped.py $T
run "moe" timeout -s INT 80 python3 -m pytest tests/gpu/test_moe_backward_fused.py tests/gpu/test_moe_layer.py -k "fused_is_bitwise or callers_buffers or memo or training_loop or refuses" $T
run "tp np1" timeout -s INT 90 python3 -m pytest tests/gpu/test_tp.py $T
run "mx np1" timeout -s INT 70 python3 -m pytest tests/gpu/test_mx.py tests/gpu/test_tp_mx.py $T
grep -E "^=====|passed|failed|FAILED|Error|compiled|^  MoELayer" "$LOG" | cut -c1-250 | tail -30
printf '%s\n' "${summary[@]}"
