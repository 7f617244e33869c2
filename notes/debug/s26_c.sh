#!/usr/bin/env bash
# For session 26 (<= 9.5 min), after s26_b.sh has shown --tree-b's twins agree: the wgrad turns
# (notes/patches/wgrad_turns.patch: the MoE backward's dgrad2 + wgrad2 and dgrad1 + wgrad1 as
# gemm::JobPair, taken turn by turn, so the wgrads' fp32 stores run under the dgrads' MMAs; every
# builder's produce/consume now return their stop code). Applied to a copy of hipsrc (tree B): the
# whole tests/gpu at np 1 on tree B (the builder changed under every kernel), the fused backward's
# bitwise tests at np 2 and 4 on tree B, then bench/moe.py --backward --tree-b (interleaved with
# main's kernels in one run). Predicted: DeepSeek-V3 256 rows fused backward 4.2 -> ~2.6-3.2 ms
# (5.6 GB of fp32 wgrad stores under MMAs), little at 2,048 rows.
#   KOSMOS_COMMIT=<sha>+wgrad_turns bash notes/debug/s26_c.sh
source notes/debug/call_env.sh s26_c
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
B_TREE=/tmp/tree_wgrad_turns
rm -rf "$B_TREE" && mkdir -p "$B_TREE/notes/debug" && cp -r hipsrc "$B_TREE/" && cp notes/debug/phases.py "$B_TREE/notes/debug/"
(cd "$B_TREE" && patch -p1 < "$OLDPWD/notes/patches/wgrad_turns.patch" >> "$LOG" 2>&1) || { echo "patch does not apply" | tee -a "$LOG"; exit 1; }
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no"
run "gpu np1 (B)" env KOSMOS_HIPSRC=$B_TREE/hipsrc timeout 260 python3 -m pytest tests/gpu $T
for n in 2 4; do
  run "bwd np$n (B)" env KOSMOS_HIPSRC=$B_TREE/hipsrc timeout 60 $MPIRUN -x KOSMOS_HIPSRC -np $n python3 -m mpi4py \
    -m pytest tests/gpu/test_moe_backward_fused.py -k "bitwise" $T
done
B="--backward --rows 256,2048 --iters 10 --warmup 3 --out $RUNS --tag s26 --tree-b $B_TREE/hipsrc"
run "bench bwd A/B" timeout 250 python3 bench/moe.py $B
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|^(FAILED|ERROR) |passed|failed|rows/exp|fused|unheld|Error|patch|H100|H200" "$LOG" | cut -c1-240 | tail -60
printf '%s\n' "${summary[@]}"
