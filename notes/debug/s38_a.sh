#!/usr/bin/env bash
# Session 38's first call (~5 min). (1) On an H200 only: session 37's chooser check (s37_g's
# steps: every bench/gemm.py shape, chooser_check's fit). (2) ncu: which kernel cuBLAS runs where it
# beats us (notes/debug/cublas_ncu.py: dsv3-gemm2, gptoss-gemm1, qwen3-30b-gemm2, smallM-1000,
# smallM-256 TN/NN, square-8192), both kernels' grid, cluster, registers, SOL. (3) What the fused
# MoE forward's GEMM1 loses to its dispatch at Qwen3-30B (world 1): bench/moe.py --tree-b with
#   nowait = GEMM tiles do not wait for their rows (RunsArrived returns at once; the pushes run),
#   nopush = that and no side pushes (the fused kernel's GEMMs, router and fold alone),
# each against main, interleaved. main - nowait = the pacing by the pushes; nowait - nopush = the
# pushes' contention; nopush - experts = the rest (prefix, fold, the fused GEMMs' own speed).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s38_a.sh
source notes/debug/call_env.sh s38_a
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU" >> "$LOG"
for t in nowait nopush; do
  rm -rf /tmp/tree_$t && mkdir -p /tmp/tree_$t && cp -r hipsrc /tmp/tree_$t/
  sed -i 's|^    i32 lo = 0, hi = t.k_end - t.k_off;  // NT: the whole group|    return true;\n&|' /tmp/tree_$t/hipsrc/kosmos/gemm/ready.h
done
sed -i 's|SideDispatch{d, side_pushes(movers)}, job_s1|SideDispatch{d, false}, job_s1|' /tmp/tree_nopush/hipsrc/kosmos/moe/forward.h
grep -c "return true;" /tmp/tree_nowait/hipsrc/kosmos/gemm/ready.h >> "$LOG"
grep -c "SideDispatch{d, false}" /tmp/tree_nopush/hipsrc/kosmos/moe/forward.h >> "$LOG"
W="moe_fused.hip moe_backward.hip moe_route.hip moe_dispatch.hip moe_combine.hip"
( for t in nowait nopush; do KOSMOS_HIPSRC=/tmp/tree_$t/hipsrc timeout 250 python3 -m kosmos.runtime.warm --jobs 2 moe_fused.hip moe_backward.hip & done; wait ) > "$OUT/warm_b.log" 2>&1 &
warm_b=$!
run "warm" timeout 250 python3 -m kosmos.runtime.warm --jobs 6 gemm.hip grouped.hip timing.hip records.hip $W
if [[ $GPU == *H200* ]]; then
  run "bench gemm both" timeout 300 python3 bench/gemm.py --set both --caps 132 --reps 8 --out $RUNS --tag s38_a
  cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
  run "chooser check" timeout 30 python3 notes/debug/chooser_check.py "$RUNS"/gemm_*.json --worse 0.02
fi
run "ncu cublas" timeout 240 ncu --clock-control none --profile-from-start off --section LaunchStats \
  --section SpeedOfLight --csv --page details --log-file "$OUT/ncu_cublas.log" python3 notes/debug/cublas_ncu.py
python3 notes/debug/cublas_ncu.py --summary "$OUT/ncu_cublas.log" > "$OUT/ncu_cublas_summary.txt" 2>&1
cat "$OUT/ncu_cublas_summary.txt" >> "$LOG"
wait $warm_b; cat "$OUT/warm_b.log" >> "$LOG"
for t in nowait nopush; do
  run "moe fwd vs $t" timeout 150 python3 bench/moe.py --models Qwen3-30B-A3B --rows 256,2048 --iters 15 --warmup 3 \
    --tree-b /tmp/tree_$t/hipsrc --out $RUNS --tag s38a_$t
done
cp "$RUNS"/moe*.json "$OUT"/ 2>/dev/null
grep -E "^=====|^group|^layout|^small|^square|^odd|^experts|^control|geomean|TILE_EFF|Error|WRONG|rows/exp|fused|experts|^\[|^     " "$LOG" | cut -c1-330 | tail -90
printf '%s\n' "${summary[@]}"
