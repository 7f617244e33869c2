#!/usr/bin/env bash
# notes/patches/kperm_batched.patch (<= 5 min): kperm_operand's kernel with the source kind (MXFP8
# row / column blocks, bf16) and the permuted axis as template arguments, so a thread's 4 scattered
# pair loads (and scales) are issued together; main's kernel switched on them between the loads,
# which kept each load behind the previous pair's conversion (SASS: LDG, branch, convert, LDG ...).
# Host launch unchanged: --tree-b compares under one grid. Compile-checked (sm_90a SASS: 12 LDG in
# one run per vector; an NN row permutation reads its 8 codes and 8 scales as one load each);
# never run on a GPU. Predicted (H100): kperm 1.2 -> 2-2.5 TB/s (8B-QKV's
# swapped wgrad dY^T 12 -> ~7 us); bench/gemm.py mxfp8 B/A (B's speed over A's) 0.95-0.98 on the
# register-path shapes, 1.00 on the pass rows. Also runs test_mx (its new direct kperm test).
#   KOSMOS_COMMIT=<sha>+kperm_batched bash notes/debug/s30_f.sh
source notes/debug/call_env.sh s30_f
kperm_patch_ab notes/patches/kperm_batched.patch s30_kperm_batched 50
