#!/usr/bin/env bash
# Session 25's last device call (<= 7 min): the backward's combine with own rows in place
# (combine.h own_in_place: rows a rank's own experts hold are not copied into its combine buffer;
# the fold reads them in y). Tests (np 1, then 2 and 4 oversubscribed: correctness only), then
# bench/moe.py --backward against the tree before it (build/old_tree = f5a52ea's kosmos, hipsrc,
# bench; carried), each run with its own device path.   KOSMOS_COMMIT=<sha> bash notes/debug/s25_d.sh
source notes/debug/call_env.sh s25_d
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
T="-q -p no:cacheprovider --timeout=120 --timeout-method=thread -rfE --color=no"
run "combine np1" timeout 60 python3 -m pytest tests/gpu/test_moe_combine.py $T
run "bwd fused np1" timeout 120 python3 -m pytest tests/gpu/test_moe_backward_fused.py $T
for n in 2 4; do
  run "combine+router np$n" timeout 75 $MPIRUN -np $n python3 -m mpi4py -m pytest tests/gpu/test_moe_combine.py \
    tests/gpu/test_moe_backward_fused.py -k "combine or router or bitwise" $T
done
run "layer bwd np1" timeout 100 python3 -m pytest tests/gpu/test_moe_layer.py -k "backward or fused" $T
B="--backward --models Qwen3-30B-A3B,DeepSeek-V3 --rows 2048 --iters 10 --warmup 3 --out $RUNS --tag s25"
run "bench bwd new" timeout 110 python3 bench/moe.py $B
run "bench bwd old" bash -c "cd build/old_tree && PYTHONPATH=\$PWD timeout 110 python3 bench/moe.py $B"
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|^(FAILED|ERROR) |passed|failed|rows/exp|fused backward|unheld|Error|H100|H200" "$LOG" | cut -c1-240 | tail -60
printf '%s\n' "${summary[@]}"
