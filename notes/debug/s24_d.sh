#!/usr/bin/env bash
# Session 24's fourth device call (<= 9.5 min): the router's dx and the shared MLP's as one job of
# the MoE backward ([d logits | d_pre_s] [Wr ; W1_s] into the fold's addend; RX after SA): the fused
# backward's tests at np 1, the layer's backward/fused tests at np 1, bench --backward against the
# previous tree (build/old_tree = 36b775a's kosmos + hipsrc + bench, carried; each run against its
# own device path), then the router/shared tests at np 2 and 4 (oversubscribed).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s24_d.sh
source notes/debug/call_env.sh s24_d
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
T="-q -p no:cacheprovider --timeout=120 --timeout-method=thread -rfE --color=no"
run "bwd tests np1" timeout 170 python3 -m pytest tests/gpu/test_moe_backward_fused.py $T
run "layer bwd np1" timeout 100 python3 -m pytest tests/gpu/test_moe_layer.py -k "backward or fused" $T
B="--models DeepSeek-V3,Qwen3-30B-A3B --rows 2048 --iters 10 --warmup 3 --out $RUNS --tag s24"
run "bench bwd new" timeout 150 python3 bench/moe.py --backward $B
run "bench bwd old" bash -c "cd build/old_tree && PYTHONPATH=\$PWD timeout 150 python3 bench/moe.py --backward $B"
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
for n in 2 4; do
  run "bwd router+shared np$n" timeout 80 $MPIRUN -np $n python3 -m mpi4py -m pytest \
    tests/gpu/test_moe_backward_fused.py -k "router or shared" $T
done
grep -E "^=====|^(FAILED|ERROR) |passed|failed|rows/exp|fused backward|unheld|Error|H100|H200" "$LOG" | cut -c1-240 | tail -60
printf '%s\n' "${summary[@]}"
