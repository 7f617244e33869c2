#!/usr/bin/env bash
# Session 34's first call (<= 5 min, any card): session 33's s33_e (never ran) plus test_tp at np 1
# (never run in that form), then what the epilogue's stores cost the short-K shapes: bench/gemm.py
# with notes/patches/no_store.patch (tree A: the TMA-store epilogue writes nothing) against main
# (tree B), interleaved. B/A speed well over 1 on the short-K expert shapes (2048 x 7168 x 2048,
# 32 slabs a tile) and ~1 on long-K ones says the epilogue under no MMA is their gap (the lead for
# an overlapped epilogue); ~1 everywhere says it is not.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s34_a.sh
source notes/debug/call_env.sh s34_a
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm main" timeout 100 python3 -m kosmos.runtime.warm --jobs 2 gemm.hip
run "bitwise widths" timeout 60 python3 -m pytest tests/gpu/test_gemm.py -k agree_bitwise -q -p no:cacheprovider -rfE
# 9c5ac06 moved the TP ops' argument memo onto call_cache.remember: not yet run on a GPU
run "tp np1" timeout 150 python3 -m pytest tests/gpu/test_tp.py -q -p no:cacheprovider --timeout=120 --timeout-method=thread -rfE --color=no
patch_over_main notes/patches/no_store.patch gemm.hip
run "no_store A/B" timeout 150 python3 bench/gemm.py --set both --shapes dsv3-gemm2-2048,qwen3-30b-gemm2-2048,gptoss-gemm1-2048,qwen3-gemm2-2048,qwen3-gemm1-2048,smallM-256,smallM-1000,square-4096,square-8192,8B-Down-MBS1,70B-FC1-MBS1 --kernels "ag_tn,ag_nn,bulk_rs_nt,experts,small M,square" --caps 132 --reps 10 --tree-b /tmp/tree_main/hipsrc --out $RUNS --tag s33_no_store
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|passed|failed|Error|patch|B/A|^(ag_|tn_rs|bulk_|small|experts|square)" "$LOG" | cut -c1-300 | tail -40
printf '%s\n' "${summary[@]}"
