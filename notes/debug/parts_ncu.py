"""Profile target for ncu: bench/moe_gemm_parts.py's grouped GEMMs (one EP-8 rank's share of a
model, every expert the same rows; its gemm_parts), one call each inside
cupy.cuda.profiler.start/stop after a warm-up, so `ncu --profile-from-start off` sees exactly
those launches, in the order named.

    python3 notes/debug/parts_ncu.py [model] [rows per expert] [part,part,...]

Parts as moe_gemm_parts prints them, spaces as underscores: fwd1_plain fwd1_swiglu fwd1_keep fwd2
wgrad2_f32 wgrad2_bf16 dgrad2_swiglu dgrad2_plain wgrad1_f32 wgrad1_bf16 dgrad1 (default: the
SwiGLU ones and their plain twins, session 27's profile). notes/debug/ncu_summary.py reads the
report.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import cupy  # noqa: E402

from moe_gemm_parts import gemm_parts  # noqa: E402

model = sys.argv[1] if len(sys.argv) > 1 else "Qwen3-30B-A3B"
rows_per = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
wanted = [w.replace("_", " ") for w in
          (sys.argv[3] if len(sys.argv) > 3 else "fwd1_plain,fwd1_swiglu,fwd1_keep,dgrad2_plain,dgrad2_swiglu").split(",")]
ours, _ = gemm_parts(model, rows_per)
unknown = [w for w in wanted if w not in ours]
if unknown:
    sys.exit(f"unknown parts {unknown}; known: {', '.join(k.replace(' ', '_') for k in ours)}")
for w in wanted:
    ours[w][0](0), ours[w][0](0)
cupy.cuda.Device().synchronize()
cupy.cuda.profiler.start()
for w in wanted:
    ours[w][0](0)
cupy.cuda.Device().synchronize()
cupy.cuda.profiler.stop()
print("profiled, in order:", ", ".join(wanted))
