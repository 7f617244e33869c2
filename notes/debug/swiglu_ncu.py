"""Profile target for ncu: the grouped GEMMs with and without their SwiGLU epilogues, Qwen3-30B's
EP-8 share at 2,048 rows per expert (bench/moe_gemm_parts.py's shapes), one call each inside
cupy.cuda.profiler.start/stop after a warm-up (run under `ncu --profile-from-start off`).
Why: fwd1 swiglu is 1.3x and dgrad2 swiglu 2.3x the same GEMM storing plainly (s27_f), far more
than the epilogue's math or bytes (notes/moe.md, session 27)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import cupy  # noqa: E402

import moe as bench_moe  # noqa: E402
from kosmos.dtypes import random_bf16  # noqa: E402
from kosmos.grouped import grouped_matmul  # noqa: E402

model = sys.argv[1] if len(sys.argv) > 1 else "Qwen3-30B-A3B"
rows_per = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
cfg = bench_moe.share(model)
e, h, i = cfg.experts, cfg.hidden, cfg.intermediate
r = e * rows_per
rows = cupy.full((e,), rows_per, cupy.int32)
xe, dye = random_bf16((r, h), 1), random_bf16((r, h), 2)
pre = random_bf16((r, 2 * i), 5)
w1, w2 = random_bf16((e, 2 * i, h), 6), random_bf16((e, h, i), 7)
kept = cupy.empty((r, 2 * i), xe.dtype)
calls = {
    "fwd1 plain": lambda: grouped_matmul(xe, w1, rows, "TN"),
    "fwd1 swiglu": lambda: grouped_matmul(xe, w1, rows, "TN", epilogue="swiglu"),
    "fwd1 keep": lambda: grouped_matmul(xe, w1, rows, "TN", epilogue="swiglu", gate_up=kept),
    "dgrad2 plain": lambda: grouped_matmul(dye, w2, rows, "NN"),
    "dgrad2 swiglu": lambda: grouped_matmul(dye, w2, rows, "NN", epilogue="swiglu_backward", gate_up=pre),
}
for f in calls.values():
    f(), f()
cupy.cuda.Device().synchronize()
cupy.cuda.profiler.start()
for name, f in calls.items():
    f()
cupy.cuda.Device().synchronize()
cupy.cuda.profiler.stop()
print("profiled:", ", ".join(calls))
