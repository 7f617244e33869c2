#!/usr/bin/env bash
# Session 30's first device call (<= 8 min): notes/patches/kperm_slabs.patch, B of the MXFP8-A GEMM
# rewritten a 64-slab (or 4 vectors of a permuted row) a thread, 16-byte loads, the permutation
# done in registers (pair 8 j + o of a slab is word j of output vector o) and one division a unit;
# before it 2-byte loads of 4 scattered pairs and an i64 division for every 16-byte vector
# (~1.5 TB/s: 19 MB in 13 us on the swapped 8B-QKV wgrad, session 29). Host launch unchanged, so
# tree B (main's kernel) runs under the same grid. Compile-checked (sm_90a, sm_80, gfx942, gfx950);
# its indexing emulated in NumPy against permute_k (session 29); never run on a GPU.
# Predicted (H100): kperm 2-2.5 TB/s; MXFP8-A register-path shapes 2-6 % faster (8B-QKV TN/NN,
# the swapped NT 8B-QKV / 70B-QKV most), the pass and bf16 rows unchanged.
#   KOSMOS_COMMIT=<sha>+kperm_slabs bash notes/debug/s30_a.sh
source notes/debug/call_env.sh s30_a
kperm_patch_ab notes/patches/kperm_slabs.patch s30_kperm 70
