"""When each CTA's units of a grouped GEMM start and end: where a short grouped GEMM's time goes.

Session 30 (notes/moe.md): at 256 rows per expert the grouped GEMMs run no faster without their
MMAs (no_mma.patch), yet a TMA ring of the same shape streams the same rows at the HBM's practical
peak (tma_ring.py): the ~2.0 TB/s is lost elsewhere -- the launch and first loads, gaps between
units, or a tail of CTAs that stream slower (a unit is ~29 us there; nothing rebalances it). This
builds grouped.hip with -DKOSMOS_TILE_TRACE (a copy of hipsrc with the define on top; the marks
are hipsrc/kosmos/trace.h tile_mark, compiled out otherwise), times a plain part of
bench/moe_gemm_parts.py (kosmos.timing, median of 20), then traces one more call and prints, in
microseconds since the first CTA's consumers entered: per unit index the median and last CTA's
first-stage-landed and epilogue-issued times and the median unit length, and the CTAs' last
epilogue (min / median / 90th percentile / max); then (--widths) the part at each tile width, interleaved medians
(kosmos.timing), to see whether more, smaller units pay. Tracing costs two stores a unit; the
timeline is for shares, not for speed claims.

    python3 notes/debug/tile_trace.py [--model Qwen3-30B-A3B] [--rows 256] [--part fwd1] [--tile-n N] [--widths]
"""
import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
src = Path(tempfile.mkdtemp(prefix="kosmos_tile_")) / "hipsrc"
shutil.copytree(ROOT / "hipsrc", src)
f = src / "grouped.hip"
f.write_text("#define KOSMOS_TILE_TRACE 1\n" + f.read_text())
os.environ["KOSMOS_HIPSRC"] = str(src)
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import cupy  # noqa: E402
import numpy as np  # noqa: E402

import moe as bench_moe  # noqa: E402 - bench/moe.py: share()
from kosmos import World, grouped  # noqa: E402
from kosmos.dtypes import random_bf16  # noqa: E402
from kosmos.timing import time_calls  # noqa: E402

SLOTS = 64  # hipsrc/kosmos/trace.h kTileTraceSlots


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="Qwen3-30B-A3B")
    ap.add_argument("--rows", type=int, default=256, help="rows per expert")
    ap.add_argument("--part", default="fwd1", choices=("fwd1", "fwd2", "dgrad1"),
                    help="x w1^T (TN), a w2^T (TN) or dpre w1 (NN), as bench/moe_gemm_parts.py's plain ones")
    ap.add_argument("--tile-n", type=int, default=None, help="256, 192 or 128 (default: the chooser's)")
    ap.add_argument("--widths", action="store_true", help="also time the part at every tile width")
    args = ap.parse_args()
    cfg = bench_moe.share(args.model)
    e, h, i = cfg.experts, cfg.hidden, cfg.intermediate
    rows = cupy.full((e,), args.rows, cupy.int32)
    r = e * args.rows
    a, b, layout = {"fwd1": lambda: (random_bf16((r, h), 1), random_bf16((e, 2 * i, h), 6), "TN"),
                    "fwd2": lambda: (random_bf16((r, i), 3), random_bf16((e, h, i), 7), "TN"),
                    "dgrad1": lambda: (random_bf16((r, 2 * i), 4), random_bf16((e, 2 * i, h), 6), "NN")}[args.part]()
    part = lambda tile_n: lambda _: grouped.grouped_matmul(a, b, rows, layout, tile_n=tile_n)  # noqa: E731
    call = part(args.tile_n)
    call(0)  # compiles grouped.hip (this tree) and makes the plan
    mod = grouped._module()  # the module the call loaded (this tree's, by $KOSMOS_HIPSRC)
    trace = cupy.ndarray((1024, SLOTS), np.uint64, mod.get_global("kosmos_tile_trace"))
    # kosmos.timing (launches queued behind a blocker: the host's time per call is not in the
    # median); then one more call alone on a cleared trace (the queue hands CTAs different units,
    # and different counts of them, from call to call)
    with World() as world:
        ms = time_calls(world, {"call": call}, 3, 20)["call"].median_ms
    trace.fill(0)
    call(0)
    cupy.cuda.Device().synchronize()
    tr = trace.get().astype(np.int64)
    ctas = np.flatnonzero(tr[:, 0])
    tr = tr[ctas]
    t0 = tr[:, 0].min()
    us = lambda v: (v - t0) / 1e3  # noqa: E731
    units = ((tr[:, 2::2][:, :31] > 0).sum(axis=1))
    print(f"{args.model} {args.rows} rows per expert, {args.part} (tile {args.tile_n or 'auto'}): "
          f"{ms * 1e3:.1f} us (median of 20), traced call: {len(ctas)} CTAs, "
          f"units a CTA {units.min()}-{units.max()} (median {np.median(units):.0f})")
    print(f"  entered: median {np.median(us(tr[:, 0])):.1f}, last {us(tr[:, 0]).max():.1f}")
    for i in range(units.max()):
        landed, done = tr[:, 1 + 2 * i], tr[:, 2 + 2 * i]
        have = done > 0
        if not have.any():
            break
        length = (done[have] - landed[have]) / 1e3
        print(f"  unit {i}: {have.sum():4d} CTAs  first stage landed median {np.median(us(landed[have])):7.1f} "
              f"last {us(landed[have]).max():7.1f}  epilogue issued median {np.median(us(done[have])):7.1f} "
              f"last {us(done[have]).max():7.1f}  length median {np.median(length):6.1f} max {length.max():6.1f}")
    last = np.array([row[2:2 + 2 * n:2].max() for row, n in zip(tr, units) if n > 0])
    print(f"  CTAs' last epilogue: min {us(last).min():.1f}  median {np.median(us(last)):.1f}  "
          f"p90 {np.percentile(us(last), 90):.1f}  max {us(last).max():.1f}")
    if args.widths:
        with World() as world:
            t = time_calls(world, {f"tile {w or 'auto'}": part(w) for w in (None, 256, 192, 128)}, 3, 20)
        print("  medians: " + "  ".join(f"{k} {v.median_ms * 1e3:.1f} us" for k, v in t.items()))


if __name__ == "__main__":
    main()
