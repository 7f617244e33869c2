#!/usr/bin/env bash
# Session 24's second device call (<= 9.5 min): the MoE backward with the router after each CTA's
# pushes and no grid meeting (so mover CTAs push dY from the start; comb_read gates the combine):
# its fused tests at np 1, bench --backward by movers 0/16/33 against the previous kernel
# (build/old_hipsrc = 9981a5a's hipsrc, carried; each run against the device path in the same run),
# the router + shared tests at np 2 and 4 (oversubscribed), the layer's backward tests at np 1.
#   KOSMOS_COMMIT=<sha> bash notes/debug/s24_b.sh
source notes/debug/call_env.sh s24_b
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
T="-q -p no:cacheprovider --timeout=120 --timeout-method=thread -rfE --color=no"
run "bwd tests np1" timeout 170 python3 -m pytest tests/gpu/test_moe_backward_fused.py $T
B="--models DeepSeek-V3,Qwen3-30B-A3B --rows 2048 --iters 10 --warmup 3 --out $RUNS --tag s24"
run "bench bwd new" timeout 200 python3 bench/moe.py --backward --movers 0,16,33 $B
run "bench bwd old" env KOSMOS_HIPSRC=$PWD/build/old_hipsrc/hipsrc timeout 150 python3 bench/moe.py --backward $B
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
for n in 2 4; do
  run "bwd router+shared np$n" timeout 60 $MPIRUN -np $n python3 -m mpi4py -m pytest \
    tests/gpu/test_moe_backward_fused.py -k "router or shared" $T
done
run "layer bwd np1" timeout 100 python3 -m pytest tests/gpu/test_moe_layer.py -k "backward or fused" $T
grep -E "^=====|^(FAILED|ERROR) |passed|failed|rows/exp|fused backward|unheld|Error|H100|H200" "$LOG" | cut -c1-240 | tail -60
printf '%s\n' "${summary[@]}"
