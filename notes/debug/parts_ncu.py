"""Profile target for ncu: bench/moe_gemm_parts.py's grouped GEMMs (one EP-8 rank's share of a
model, every expert the same rows), one call each inside cupy.cuda.profiler.start/stop after a
warm-up, so `ncu --profile-from-start off` sees exactly those launches, in the order named.

    python3 notes/debug/parts_ncu.py [model] [rows per expert] [part,part,...]

Parts: fwd1_plain fwd1_swiglu fwd1_keep fwd2 wgrad2_f32 wgrad2_bf16 dgrad2_swiglu dgrad2_plain
wgrad1_f32 wgrad1_bf16 dgrad1 (default: the SwiGLU ones and their plain twins, session 27's
profile). Then notes/debug/ncu_summary.py reads the report.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

import moe as bench_moe  # noqa: E402
from kosmos.dtypes import random_bf16  # noqa: E402
from kosmos.grouped import grouped_matmul  # noqa: E402

model = sys.argv[1] if len(sys.argv) > 1 else "Qwen3-30B-A3B"
rows_per = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
wanted = (sys.argv[3] if len(sys.argv) > 3 else "fwd1_plain,fwd1_swiglu,fwd1_keep,dgrad2_plain,dgrad2_swiglu").split(",")
cfg = bench_moe.share(model)
e, h, i = cfg.experts, cfg.hidden, cfg.intermediate
r = e * rows_per
rows = cupy.full((e,), rows_per, cupy.int32)
xe, dye = random_bf16((r, h), 1), random_bf16((r, h), 2)
a, dpre, pre = random_bf16((r, i), 3), random_bf16((r, 2 * i), 4), random_bf16((r, 2 * i), 5)
w1, w2 = random_bf16((e, 2 * i, h), 6), random_bf16((e, h, i), 7)
kept = cupy.empty((r, 2 * i), xe.dtype)
f32 = np.float32
parts = {  # the same calls as bench/moe_gemm_parts.py's
    "fwd1_plain": lambda: grouped_matmul(xe, w1, rows, "TN"),
    "fwd1_swiglu": lambda: grouped_matmul(xe, w1, rows, "TN", epilogue="swiglu"),
    "fwd1_keep": lambda: grouped_matmul(xe, w1, rows, "TN", epilogue="swiglu", gate_up=kept),
    "fwd2": lambda: grouped_matmul(a, w2, rows, "TN"),
    "wgrad2_f32": lambda: grouped_matmul(dye, a, rows, "NT", out_dtype=f32),
    "wgrad2_bf16": lambda: grouped_matmul(dye, a, rows, "NT"),
    "dgrad2_swiglu": lambda: grouped_matmul(dye, w2, rows, "NN", epilogue="swiglu_backward", gate_up=pre),
    "dgrad2_plain": lambda: grouped_matmul(dye, w2, rows, "NN"),
    "wgrad1_f32": lambda: grouped_matmul(dpre, xe, rows, "NT", out_dtype=f32),
    "wgrad1_bf16": lambda: grouped_matmul(dpre, xe, rows, "NT"),
    "dgrad1": lambda: grouped_matmul(dpre, w1, rows, "NN"),
}
unknown = [w for w in wanted if w not in parts]
if unknown:
    sys.exit(f"unknown parts {unknown}; known: {', '.join(parts)}")
for w in wanted:
    parts[w](), parts[w]()
cupy.cuda.Device().synchronize()
cupy.cuda.profiler.start()
for w in wanted:
    parts[w]()
cupy.cuda.Device().synchronize()
cupy.cuda.profiler.stop()
print("profiled, in order:", ", ".join(wanted))
