#!/usr/bin/env bash
# Session 29's call right after s29_a.sh (<= 7 min, same warm machine: its compiles are cached):
# the rest of notes/patches/producer_regs.patch's A/B, the kernels whose consumers lose 8 registers
# and whose producers gain 16 without side pushes: bench/grouped_gemm.py --quick and bench/tp.py
# --quick (world 1: fused against fused B), both --tree-b main. Predicted: within +-1 % (ptxas: no
# spill either way in grouped; fewer in tp). Then the MXFP8 NT rows (the wgrad on column-wise copies
# stored transposed, as a TN: predicted mxfp8/bf16 0.784 -> ~0.85 geomean, the gain on the shapes of
# <= 4,096 output columns, the register path). Then notes/debug/sk_order.py (main's kernels, ~1 min):
# is forced stream-K's 2.5-11 % lead on four 405B shapes the kernel's or its place in the round?
#   KOSMOS_COMMIT=<sha>+producer_regs bash notes/debug/s29_c.sh
source notes/debug/call_env.sh s29_c
patch_over_main notes/patches/producer_regs.patch grouped.hip tp.hip gemm.hip mx.hip
run "grouped A/B" timeout 120 python3 bench/grouped_gemm.py --quick --iters 15 --tree-b /tmp/tree_main/hipsrc --out $RUNS
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
run "tp A/B" timeout 200 python3 bench/tp.py --quick --iters 12 --tree-b /tmp/tree_main/hipsrc --out $RUNS
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
run "mx NT as TN" timeout 120 python3 bench/gemm.py --quick --kernels bulk_rs_nt --precision mxfp8 --caps 132 --reps 15 --out $RUNS --tag s29_mxnt
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
run "sk order (main)" env KOSMOS_HIPSRC=/tmp/tree_main/hipsrc timeout 150 python3 notes/debug/sk_order.py
grep -E "^=====|compiled|^(FAILED|ERROR) |passed|failed|B/A|Error|patch|sk/w256|mxfp8/bf16" "$LOG" | cut -c1-200 | tail -90
printf '%s\n' "${summary[@]}"
