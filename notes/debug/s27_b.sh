#!/usr/bin/env bash
# Session 27 (<= 5 min): the MXFP8-A mainloop's one-multiply conversion (notes/patches/
# mx_one_multiply.patch, branch s26-mx-one-multiply; compile-checked sm_90a: no spill, no
# serialized wgmma). Where a warp's scales of a slab are all <= 134 (2^7: nearly every block),
# one bf16x2 multiply a pair by 2^(s-7) instead of x 2^120 then x 2^(s-127), and the factor by one
# IMAD; elsewhere the old two. Applied to the device's copy; main's hipsrc copied to /tmp/tree_main
# first (tree B). tests/gpu/test_mx.py (both forms on every (code, scale); the mainloop bitwise the
# bf16 GEMM on rows 2^-24..2^24 apart, so slabs of both forms), then bench/gemm.py --quick
# --precision mxfp8 --tree-b (B = main's kernels, interleaved). Predicted: mxfp8 +2-4 % on the
# register-path shapes (TN/NN, N <= 2,048), nothing elsewhere; "B/A mxfp8" 0.96-0.98.
#   KOSMOS_COMMIT=<sha>+mx_one_multiply bash notes/debug/s27_b.sh
source notes/debug/call_env.sh s27_b
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
rm -rf /tmp/tree_main && mkdir -p /tmp/tree_main && cp -r hipsrc /tmp/tree_main/
git apply notes/patches/mx_one_multiply.patch >> "$LOG" 2>&1 || { echo "patch does not apply" | tee -a "$LOG"; exit 1; }
KOSMOS_HIPSRC=/tmp/tree_main/hipsrc timeout 200 python3 -m kosmos.runtime.warm --jobs 2 gemm.hip mx.hip > "$OUT/warm_b.log" 2>&1 &
warm_b=$!
run "warm A" timeout 200 python3 -m kosmos.runtime.warm --jobs 4 gemm.hip mx.hip timing.hip records.hip
wait $warm_b
cat "$OUT/warm_b.log" >> "$LOG"
run "test_mx" timeout 150 python3 -m pytest tests/gpu/test_mx.py -q -p no:cacheprovider --timeout=140 -rfE --color=no
run "bench mxfp8 A/B" timeout 200 python3 bench/gemm.py --quick --precision mxfp8 --caps 132 --reps 20 \
  --tree-b /tmp/tree_main/hipsrc --out "$RUNS" --tag s27_mx
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|^(ok|FAIL) |compiled|^(FAILED|ERROR) |passed|failed|B/A|summary|group|layout|Error|patch" "$LOG" | cut -c1-260 | tail -50
printf '%s\n' "${summary[@]}"
