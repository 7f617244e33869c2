#!/usr/bin/env bash
# Session 32's first device call (<= 9 min, any card; written in session 31, never run):
# 1. notes/patches/grouped_clusters.patch applied: the grouped TN / NN on 2-CTA clusters sharing
#    each weight slab by TMA multicast (grouped_matmul(cluster=True)). Its GPU tests first
#    (all of tests/gpu: the patch touches every builder kernel's init; the cluster cases are bitwise
#    the dense oracle on odd tile rows, empty groups, odd SM caps, a 64-slab reduction), then bench/grouped_gemm.py --quick --cluster ("c2 x": ours' time over the clusters'; the
#    prediction, notes/moe.md session 31: Qwen3-30B GEMM1 at 256 rows 58.7 -> ~51-52 us, x1.13;
#    compute-bound 2,048-row cases ~x1.00).
# (The paper set and the launch floor run on main in s32_c.sh.)
#   KOSMOS_COMMIT=<sha>+grouped_clusters bash notes/debug/s32_a.sh
source notes/debug/call_env.sh s32_a
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
git apply notes/patches/grouped_clusters.patch >> "$LOG" 2>&1 || { echo "patch does not apply" | tee -a "$LOG"; exit 1; }
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 4 grouped.hip gemm.hip mx.hip transpose.hip
# the other kernels keep main's opcode sequence (ptxas SASS compared in session 31): the grouped and GEMM tests only
run "gpu tests" timeout 240 python3 -m pytest tests/gpu/test_grouped.py tests/gpu/test_gemm.py -q -p no:cacheprovider
run "grouped quick c2" timeout 150 python3 bench/grouped_gemm.py --quick --cluster --out $RUNS

cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -vE "^compiling|^ok " "$LOG" | grep -vE "^(ag_|tn_rs|bulk_)" | cut -c1-300 | tail -70
printf '%s\n' "${summary[@]}"
