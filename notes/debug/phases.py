"""Where the fused MoE kernels' time goes: per-CTA phase timestamps (hipsrc/kosmos/trace.h).

    python3 notes/debug/phases.py [--model Qwen3-30B-A3B] [--rows 2048] [--movers N,..] [--crew N,..] [-D NAME=VALUE]
        [--ranks P (P EP-8 ranks' experts on the GPU; 8: the router's whole E)] [--forward-only]

Builds the fused MoE kernels (hipsrc/moe_fused_*.hip) with -DKOSMOS_PHASE_TRACE (a copy of hipsrc
with the define on top of each, in a directory named by the tree's digest and the defines: CuPy's
compile cache keys on the -I path, so a fresh directory a run cost full compiles, ~45-60 s, every
run), runs
path "fused" forward + backward at world 1, and prints per phase and per CTA group (the crew
[0, crew), the other movers [crew, movers), the builders [movers, grid)) the median and the last
CTA's time since the kernel's first CTA entered, in microseconds. Tracing costs a few stores per
CTA; the timeline is for shares, not for claims of speed (bench/moe.py is).
"""
import argparse
import hashlib
import itertools
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
from kosmos.runtime.source import hipsrc_dir, tree_digest  # noqa: E402

defines = ["KOSMOS_PHASE_TRACE=1"] + [sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "-D"]
tree = hipsrc_dir()  # this checkout's, or $KOSMOS_HIPSRC's
key = hashlib.sha256((tree_digest(str(tree)) + " ".join(defines)).encode()).hexdigest()[:16]
src = Path(tempfile.gettempdir()) / f"kosmos_phase_{key}" / "hipsrc"
if not src.is_dir():  # else the same tree and defines were traced before: the same source, a cache hit
    tmp = Path(tempfile.mkdtemp(prefix="kosmos_phase_")) / "hipsrc"
    shutil.copytree(tree, tmp)
    for f in tmp.glob("moe_fused_*.hip"):
        f.write_text("".join(f"#define {d.replace('=', ' ', 1)}\n" for d in defines) + f.read_text())
    try:
        tmp.parent.rename(src.parent)  # whole, or not at all (a concurrent run may have won)
    except OSError:
        shutil.rmtree(tmp.parent, ignore_errors=True)
os.environ["KOSMOS_HIPSRC"] = str(src)

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from kosmos import gemm  # noqa: E402
from kosmos.moe.dispatch import fused_kernel_file  # noqa: E402
from kosmos.dtypes import random_bf16  # noqa: E402
from kosmos.moe import MoELayer  # noqa: E402
from kosmos.runtime import load_module  # noqa: E402
from kosmos.world import World  # noqa: E402
from moe import capacity_of, case_params, share, tokens_of  # noqa: E402

NAMES = {0: "entry", 1: "dispatch part done", 2: "builder ready", 8: "builder call done", 10: "combine push done",
         11: "side pushes done", 9: "combine done"}
KIND_NAMES = {"forward": {12: "router GEMM done", 16: "router grid barrier passed", 17: "router logits summed",
                          3: "round's rows staged", 4: "thread 0: row max + exp-sum", 5: "thread 0: top-k chosen",
                          6: "thread 0: norm + stores", 18: "tokens routed (a round)", 13: "routed + counted",
                          14: "plan placed",
                          15: "pairs past capacity dropped"}, "backward": {}}
JOBS = {"forward": ["shared S1 (TN SwiGLU)", "GEMM1 (TN SwiGLU)", "GEMM2 (TN)", "shared S2 (TN fp32)"],
        "backward": ["RW router dWr", "RX router dXr", "SA shared dgrad2", "SB shared wgrad2", "A dgrad2+SwiGLU bwd",
                     "B wgrad2", "C dgrad1", "D wgrad1", "SC shared dgrad1", "SD shared wgrad1"]}
SLOTS = 32  # hipsrc/kosmos/trace.h kPhaseSlots: a job's slot is 31 - the jobs after it


def show(kind, tr, grid, movers, crew):
    tr = tr[:grid].astype(np.int64)
    t0 = tr[:, 0].min()
    names = {**NAMES, **KIND_NAMES[kind]}
    for j, n in enumerate(JOBS[kind]):
        names[SLOTS - len(JOBS[kind]) + j] = f"job {n} done"
    groups = {"crew": range(0, crew), "movers": range(crew, movers), "builders": range(movers, grid)}
    print(f"\n{kind}: grid {grid}, movers {movers}, crew {crew}; us since the first CTA's entry "
          f"(median / last CTA of each group)")
    print(f"  {'phase':28s}" + "".join(f"{g:>22s}" for g in groups))
    # the jobs between ready and call done; the routing's inner steps after the router GEMM
    order = {10: 9.5, **{s: 7 + s / 100 for s in range(19, SLOTS)}, 16: 12.1, 17: 12.2, 3: 12.21, 4: 12.22,
             5: 12.23, 6: 12.24, 18: 12.3}
    for slot in sorted(names, key=lambda s: order.get(s, s)):
        row = f"  {names[slot]:28s}"
        for g, idx in groups.items():
            v = tr[list(idx), slot] if len(idx) else np.zeros(0, np.int64)
            v = v[v > 0]
            row += f"{'-':>22s}" if not len(v) else f"{np.median(v - t0) / 1e3:10.1f} /{(v.max() - t0) / 1e3:9.1f}  "
        print(row, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="Qwen3-30B-A3B")
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--movers", default="", help="comma-separated; each with each crew (default: the layer's)")
    ap.add_argument("--crew", default="")
    ap.add_argument("-D", action="append", default=[], help="a define of the fused kernels, NAME=VALUE (read above)")
    ap.add_argument("--ranks", type=int, default=1,
                    help="this many EP-8 ranks' experts on the one GPU (8: the whole model, its router's E)")
    ap.add_argument("--forward-only", action="store_true")
    args = ap.parse_args()
    world = World()
    cfg = share(args.model, args.ranks)
    tokens = tokens_of(cfg, args.rows, 1)
    print(f"{cfg.name}: {tokens} tokens, {args.rows} rows per expert on average, E/P {cfg.experts}, H {cfg.hidden}, "
          f"I {cfg.intermediate}", flush=True)
    params = case_params(world, cfg, False, 1)
    x, dy = random_bf16((tokens, cfg.hidden), 3), random_bf16((tokens, cfg.hidden), 4)

    def trace_of(kernel):  # the trace buffer of the kernel's module (each has its own)
        mod = load_module(fused_kernel_file(kernel), world=world, extra_options=gemm._extra_options)
        return cupy.ndarray((1024, SLOTS), np.uint64, mod.get_global("kosmos_phase_trace"))

    trace = trace_of("kosmos_moe_forward")
    ints = lambda text: [int(v) for v in text.split(",")] if text else [None]  # noqa: E731
    for m, c in itertools.product(ints(args.movers), ints(args.crew)):
        layer = MoELayer(world, cfg, max_tokens=tokens, capacity_rows=capacity_of(cfg, tokens, 1), path="fused",
                         movers=m, crew=c)
        fwd = layer._forward
        movers, crew = fwd._crews(m, c)
        trace_b = None
        for it in range(3):  # the last call's timeline (the first compiles and warms up)
            trace.fill(0)
            y, ctx = layer.forward(x, params, check=True)
            cupy.cuda.Device().synchronize()
            tf = trace.get()
            if args.forward_only:
                continue
            if trace_b is not None:
                trace_b.fill(0)
            layer.backward(dy, ctx, params)
            cupy.cuda.Device().synchronize()
            bwd = next(iter(layer._backwards.values()))  # made by the first backward call
            if trace_b is None:
                trace_b = trace_of(bwd.kernel)
            tb = trace_b.get()
        show("forward", tf, fwd.grid, movers, crew)
        if not args.forward_only:
            show("backward", tb, bwd.grid, *bwd._crews(m, c))
        layer.close()

if __name__ == "__main__":
    main()
