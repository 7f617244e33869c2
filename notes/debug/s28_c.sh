#!/usr/bin/env bash
# Session 28's third device call (<= 8 min): notes/patches/prefetch_b.patch: the Hopper producer
# prefetches grouped B (expert weights) into L2, kPrefetchSlabsB = 4 slabs at a time past the ring
# (cp.async.bulk.prefetch.tensor). Why: ncu at Qwen3-30B 256 rows per expert (session 28,
# notes/moe.md): fwd1/dgrad1 at 66 % of DRAM bandwidth and 47 % tensor-pipe activity, consumers
# waiting on full stages 58 % of their time, the producer waiting on empty ones: the 4-stage ring's
# ~160 KB in flight per SM is what bounds it (each stage's load takes ~3 us under that load).
# Predicted (H100): moe_gemm_parts at 256 rows B/A time 1.1-1.25 on fwd1/fwd2/dgrad1/dgrad2,
# ~1.00 at 2,048; grouped bench 256 rows 1.1-1.2; ncu DRAM throughput 66 -> 75-85 %.
#   KOSMOS_COMMIT=<sha>+prefetch_b bash notes/debug/s28_c.sh
source notes/debug/call_env.sh s28_c
patch_over_main notes/patches/prefetch_b.patch grouped.hip moe_fused.hip moe_backward.hip
T="-q -p no:cacheprovider --timeout=200 --timeout-method=thread -rfE --color=no"
run "grouped + MoE tests np1" timeout 170 python3 -m pytest tests/gpu/test_grouped.py tests/gpu/test_moe_layer.py tests/gpu/test_moe_forward.py tests/gpu/test_moe_backward_fused.py $T
run "parts A/B" timeout 90 python3 bench/moe_gemm_parts.py --rows 256,2048 --tree-b /tmp/tree_main/hipsrc
run "grouped A/B" timeout 150 python3 bench/grouped_gemm.py --quick --iters 15 --tree-b /tmp/tree_main/hipsrc --out $RUNS
B="--models Qwen3-30B-A3B,DeepSeek-V3 --rows 256,2048 --iters 10 --warmup 3 --out $RUNS --tag s28c --tree-b /tmp/tree_main/hipsrc"
run "bench fwd A/B" timeout 90 python3 bench/moe.py $B
run "bench bwd A/B" timeout 90 python3 bench/moe.py --backward $B
run "ncu fwd1 dgrad1" timeout 60 ncu --clock-control none --profile-from-start off --kernel-name regex:kosmos_grouped --section SpeedOfLight -o $OUT/pf -f python3 notes/debug/parts_ncu.py Qwen3-30B-A3B 256 fwd1_plain,dgrad1
ncu --import $OUT/pf.ncu-rep --page details 2>&1 | grep -E "^  kosmos_grouped|Duration|DRAM Throughput" >> "$LOG"
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|compiled|^(FAILED|ERROR) |passed|failed|B/A|rows/exp|fused|Error|patch|kosmos_grouped|Duration|DRAM" "$LOG" | cut -c1-200 | tail -80
printf '%s\n' "${summary[@]}"
