"""epilogue="accumulate" (out += a b, the TMA unit adding in L2) against a fresh fp32 product added
on the stream (`out += matmul(...)`, what the MoE backward did for the shared MLP's dx), at the
shared MLP's dgrad1 shapes of the DeepSeek-V3 EP-8 share (T tokens x 2Fs=4096 @ [4096, 7168]).

    python3 notes/debug/accumulate_ab.py [--tokens 8192,65536] [--iters 20]
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from kosmos import gemm  # noqa: E402
from kosmos.dtypes import random_bf16  # noqa: E402
from kosmos.timing import device_name, time_calls  # noqa: E402
from kosmos.world import World  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--tokens", default="8192,65536")
ap.add_argument("--k", type=int, default=4096)
ap.add_argument("--n", type=int, default=7168)
ap.add_argument("--iters", type=int, default=20)
args = ap.parse_args()
world = World()
print(f"# {device_name()}, world 1; NN [T, {args.k}] @ [{args.k}, {args.n}] into fp32 [T, {args.n}]; ms, median of "
      f"{args.iters}")
for t in (int(v) for v in args.tokens.split(",")):
    a, b = random_bf16((t, args.k), 1), random_bf16((args.k, args.n), 2)
    out = cupy.asarray(np.random.default_rng(3).standard_normal((t, args.n), np.float32))
    ref = out + gemm.matmul(a, b, "NN", out_dtype=np.float32)
    got = out.copy()
    gemm.matmul(a, b, "NN", out=got, epilogue="accumulate")
    same = bool((got.view(np.uint32) == ref.view(np.uint32)).all())

    def added(_):
        out.__iadd__(gemm.matmul(a, b, "NN", out_dtype=np.float32))

    def accumulated(_):
        gemm.matmul(a, b, "NN", out=out, epilogue="accumulate")

    tm = time_calls(world, {"+= matmul": added, "accumulate": accumulated, "matmul alone": lambda _: gemm.matmul(
        a, b, "NN", out_dtype=np.float32)}, 3, args.iters)
    x, y, z = (tm[k].median_ms for k in ("+= matmul", "accumulate", "matmul alone"))
    print(f"T {t:6d}: += matmul {x:8.3f}  accumulate {y:8.3f}  ({x / y:.3f}x)  matmul alone {z:8.3f}"
          f"{'' if same else '  (bits differ from += of the default plan: it may cut K-ranges)'}", flush=True)
    del a, b, out, ref, got
    cupy.get_default_memory_pool().free_all_blocks()
