"""When each CTA's units of a grouped GEMM start and end: where a short grouped GEMM's time goes.

Session 30 (notes/moe.md): at 256 rows per expert the grouped GEMMs run no faster without their
MMAs (no_mma.patch), yet a TMA ring of the same shape streams the same rows at the HBM's practical
peak (tma_ring.py): the ~2.0 TB/s is lost elsewhere -- the launch and first loads, gaps between
units, or a tail of CTAs that stream slower (a unit is ~29 us there; nothing rebalances it). This
builds grouped.hip with -DKOSMOS_TILE_TRACE (a copy of hipsrc with the define on top; the marks
are hipsrc/kosmos/trace.h tile_mark, compiled out otherwise), runs bench/moe_gemm_parts.py's part
a few times and prints, for the last call, microseconds since the first CTA's consumers entered:
per unit index the median and last CTA's first-stage-landed and epilogue-issued times, the
median unit length, and the CTAs' last epilogue (min / median / 90th percentile / max), beside the
call's event-timed length. Tracing costs two stores a unit; the timeline is for shares, not for
speed claims.

    python3 notes/debug/tile_trace.py [--model Qwen3-30B-A3B] [--rows 256] [--part "fwd1 plain"]
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

from kosmos import grouped  # noqa: E402
from moe_gemm_parts import gemm_parts  # noqa: E402

SLOTS = 64  # hipsrc/kosmos/trace.h kTileTraceSlots


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="Qwen3-30B-A3B")
    ap.add_argument("--rows", type=int, default=256, help="rows per expert")
    ap.add_argument("--part", default="fwd1 plain", help="a part of bench/moe_gemm_parts.py")
    args = ap.parse_args()
    ours, _ = gemm_parts(args.model, args.rows)
    call = ours[args.part][0]
    call(0)  # compiles grouped.hip (this tree) and makes the plan
    mod = grouped._module()  # the module the call loaded (this tree's, by $KOSMOS_HIPSRC)
    trace = cupy.ndarray((1024, SLOTS), np.uint64, mod.get_global("kosmos_tile_trace"))
    for _ in range(3):
        trace.fill(0)
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record()
        call(0)
        b.record()
        b.synchronize()
    ms = cupy.cuda.get_elapsed_time(a, b)
    tr = trace.get().astype(np.int64)
    ctas = np.flatnonzero(tr[:, 0])
    tr = tr[ctas]
    t0 = tr[:, 0].min()
    us = lambda v: (v - t0) / 1e3  # noqa: E731
    units = ((tr[:, 2::2][:, :31] > 0).sum(axis=1))
    print(f"{args.model} {args.rows} rows per expert, {args.part}: {ms * 1e3:.1f} us by events, {len(ctas)} CTAs, "
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


if __name__ == "__main__":
    main()
