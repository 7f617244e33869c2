#!/usr/bin/env bash
# A diagnostic, never to keep (<= 4 min): notes/patches/mx_bconv_diag.patch makes the MXFP8-A
# consumers do, under each slab's MMAs, the dequantization work a B stage converted in shared
# memory would cost them (kN x 64 codes over the 256 consumer threads: LDS.128, the two-multiply
# conversion, folded into a sink; no shared stores) plus a barrier of both warpgroups a slab (the
# handoff a bf16 B buffer would need). SASS: +112 instructions a slab variant (twice A's own
# conversion work). Question (notes/mxfp8.md, session 30): can the consumers convert B themselves,
# instead of kperm's HBM rewrite (~10 % of the register-path shapes' time)? If bench/gemm.py's
# "B/A time mxfp8" (main's time over the patch's) stays >= ~0.97 on the register-path rows, yes;
# if <= ~0.93, no (the producer warpgroup's idle warps would have to, with fewer issue slots).
#   KOSMOS_COMMIT=<sha>+mx_bconv_diag bash notes/debug/s30_h.sh
source notes/debug/call_env.sh s30_h
patch_over_main notes/patches/mx_bconv_diag.patch gemm.hip mx.hip transpose.hip
run "gemm mx A/B" timeout 300 python3 bench/gemm.py --quick --precision mxfp8 --caps 132 --reps 15 --tree-b /tmp/tree_main/hipsrc --out $RUNS --tag s30_bconv_diag
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|compiled|^(FAILED|ERROR) |passed|failed|B/A|Error|patch|mxfp8/bf16" "$LOG" | cut -c1-260 | tail -40
printf '%s\n' "${summary[@]}"
