#!/usr/bin/env bash
# Session 28's fourth device call (<= 8 min): main as committed (6edc25c: quad_tails touched the
# builder's epilogues under every kernel) through the whole tests/gpu at np 1, the TP / grouped /
# MoE bitwise tests at np 2 (oversubscribed: correctness only), and what this H100's HBM gives a
# plain streaming read (cupy sum over 512 MB; the ceiling the small-M grouped GEMMs' 2.2 TB/s is
# measured against in notes/moe.md, session 28).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s28_d.sh
source notes/debug/call_env.sh s28_d
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
run "warm" timeout 200 python3 -m kosmos.runtime.warm --jobs 12
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no"
run "gpu np1" timeout 290 python3 -m pytest tests/gpu $T
run "np2" timeout 100 $MPIRUN -np 2 python3 -m mpi4py -m pytest tests/gpu/test_tp.py tests/gpu/test_grouped.py \
  tests/gpu/test_moe_layer.py tests/gpu/test_moe_backward_fused.py -k "bitwise or matches or small" $T
run "hbm read" timeout 60 python3 -c "
import cupy, numpy
x = cupy.ones(2**28, cupy.float16)  # 512 MB
s, e = cupy.cuda.Event(), cupy.cuda.Event()
ts = []
for i in range(25):
    s.record(); y = x.sum(dtype=cupy.float32); e.record(); e.synchronize()
    ts.append(cupy.cuda.get_elapsed_time(s, e))
t = float(numpy.median(ts[5:]))
print(f'hbm read (cupy sum, 512 MB): {t:.3f} ms, {x.nbytes / t / 1e9:.2f} TB/s')
"
grep -E "^=====|^(FAILED|ERROR) |passed|failed|Error|hbm|H100|H200" "$LOG" | cut -c1-240 | tail -40
printf '%s\n' "${summary[@]}"
