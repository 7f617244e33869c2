#!/usr/bin/env bash
# Session 30's second device call (<= 6 min; after s30_a.sh on the same machine or alone):
# notes/patches/transposed_store.patch, the swapped MXFP8 wgrad's result stored transposed by the
# MxA GEMM's epilogue (EpiStoreBf16TmaT: each 64 x 64 subtile staged transposed, 2-byte shared
# stores, the TMA store at swapped coordinates on out's own map) instead of a transpose pass.
# Compile-checked (sm_90a), no spills; never run on a GPU. The host path differs (kernel names
# *_t), so no --tree-b: notes/debug/mx_swap_parts.py times both in one process ("swapped": the
# epilogue; "swapped, pass": the GEMM then hipsrc/transpose.hip). Predicted (H100): 8B-QKV 99 ->
# ~91 us, 70B-QKV 1,094 -> ~1,075 us (the pass's 8.4 / 20 us gone, the epilogue's extra stores
# hidden); NT geomean 0.805 -> ~0.82.
#   KOSMOS_COMMIT=<sha>+transposed_store bash notes/debug/s30_b.sh
source notes/debug/call_env.sh s30_b
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no"
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
git apply notes/patches/transposed_store.patch >> "$LOG" 2>&1 || { echo "patch does not apply" | tee -a "$LOG"; exit 1; }
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 4 gemm.hip mx.hip transpose.hip
run "mx + gemm tests np1" timeout 200 python3 -m pytest tests/gpu/test_mx.py tests/gpu/test_gemm.py $T
run "swap parts" timeout 100 python3 notes/debug/mx_swap_parts.py
run "gemm mx NT" timeout 150 python3 bench/gemm.py --quick --kernels bulk_rs_nt --precision mxfp8 --caps 132 --reps 15 --out $RUNS --tag s30_tstore
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|compiled|^(FAILED|ERROR) |passed|failed|Error|patch|mxfp8/bf16|8B-QKV|70B-QKV" "$LOG" | cut -c1-260 | tail -40
printf '%s\n' "${summary[@]}"
