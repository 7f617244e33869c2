#!/usr/bin/env bash
# Session 31's second device call (<= 5 min, any card), main as committed:
# 1. notes/debug/tma_ring.py with its L2 variants: the ring read by 4 and 8 CTAs a row (share4,
#    share8: does L2 -> SM traffic of 4-8x the DRAM bytes slow a stream?), and the grouped GEMM's
#    load stream (tma_units) without A, without B, with B loaded by tile row 0's unit only (what a
#    2-CTA multicast of the weights would leave): which of its bytes hold Qwen3-30B fwd1 at 256
#    rows per expert at ~2.3 TB/s (s31_a: 51 us, the GEMM 58 us, the DRAM floor ~38 us).
# 2. bench/gemm.py mxfp8 on the NT shapes whose route a bf16 mx_swap_pays without the transpose
#    term would change (8B-FC1 MBS1/2/4 on the H100: regs -> swapped) and two swapped ones: the
#    "(swapped x)" / "(regs x)" contenders are the refit's data.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s31_b.sh
source notes/debug/call_env.sh s31_b
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 4 gemm.hip mx.hip transpose.hip grouped.hip
run "tma ring" timeout 150 python3 notes/debug/tma_ring.py
run "gemm mx NT" timeout 200 python3 bench/gemm.py --kernels bulk_rs_nt --shapes 8B-FC1-MBS1,8B-FC1-MBS2,8B-FC1-MBS4,8B-QKV-MBS1,70B-QKV-MBS1 --precision mxfp8 --caps 132 --reps 15 --out $RUNS --tag s31_swap
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -vE "^compiling|^ok " "$LOG" | cut -c1-330 | tail -45
printf '%s\n' "${summary[@]}"
