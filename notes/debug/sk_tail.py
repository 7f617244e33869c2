"""Which tiles should stream-K cut? An A/B of kosmos.gemm.stream_k_split's choice (issue 11).

stream_k_split keeps all but the last one to two waves of 128 x 256 tiles whole and cuts the rest
into 2-4 K-ranges ("sk": (q - 1) * ctas whole tiles, q = tiles // ctas). Its alternative cuts only
the last partial wave ("sk_q R": q * ctas whole, the remainder in R ranges): fewer fp32 partials
(each 128 KB written and read back) for the same wave count in the model on e.g. dsv3-gemm2
(2048 x 7168 x 2048: 448 tiles on 132 CTAs, model sk 111 us, sk_q2 100 us, w256 109 us; measured
on the H100 in session 36: w256 627, sk 584 TF/s, cuBLAS 763). Per shape, interleaved call by call
(kosmos.timing, median of --iters after warm-up, one GPU alone): cuBLAS, w256 / w192 / w128 forced,
sk, sk_q2 / sk_q3 / sk_q4, with the wave model's time of each beside it: the data for the
model's fix-up and per-unit costs (STREAM_K_* in kosmos/gemm.py) and for the choice of `full`.
Checks every whole-tile contender bitwise against w256 (they reduce in the same order), the
stream-K ones within 1e-2 of it (K-ranges round differently).

    python3 notes/debug/sk_tail.py [--iters 10] [--shapes dsv3-gemm2-2048,...]
"""
import argparse
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from kosmos import World, gemm  # noqa: E402
from kosmos.dtypes import bf16_to_f32, bfloat16, random_bf16  # noqa: E402
from kosmos.runtime.launch import sm_count  # noqa: E402
from kosmos.shapes import PaperShape, load_llama3_shapes  # noqa: E402
from kosmos.timing import check_timeable, device_name, git_commit, time_calls  # noqa: E402

spec = importlib.util.spec_from_file_location("bench_gemm", ROOT / "bench" / "gemm.py")
bench_gemm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_gemm)

# The short-K experts and small-M shapes (issue 11's gaps) and paper shapes where stream-K was chosen
# or lost (notes/gemm.md sessions 28-31).
# The last four: where notes/patches/sk_tail_split.patch (stream_k_split searching both) changes the choice.
DEFAULT = ("dsv3-gemm2-2048,gptoss-gemm1-2048,qwen3-gemm2-2048,dsv3-wgrad-2048,dsv3-gemm1-2048,smallM-256,"
           "smallM-1000,smallM-256-NN,oddM-3001,TN:405B-Down-MBS8,NT:8B-QKV-MBS8,NN:70B-OProj-MBS4,"
           "NT:8B-FC1-MBS1,TN:70B-QKV-MBS1,NN:8B-Down-MBS1,NT:70B-QKV-MBS4")


def shapes_named(names: str) -> list[PaperShape]:
    paper = {(s.layout, s.name): s for s in load_llama3_shapes()}
    other = {s.name: s for s in bench_gemm.other_shapes()}
    out = []
    for n in names.split(","):
        out.append(paper[tuple(n.split(":"))] if ":" in n else other[n])
    return out


def split_plan(shape, split: gemm.StreamKSplit, cap: int):
    """A stream-K plan with this split (stream_k_split patched while it is built; sm_cap = cap,
    >= the SM count: the same grid, a plan cache key of its own)."""
    real = gemm.stream_k_split
    gemm.stream_k_split = lambda ntiles, ctas, k_slabs: split
    try:
        return gemm.get_plan(shape, bfloat16, sm_cap=cap, split_k=1, stream_k=True)
    finally:
        gemm.stream_k_split = real


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--shapes", default=DEFAULT)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    import cupy

    rows = []
    with World() as world:
        check_timeable(world, False)
        sms = sm_count()
        print(f"sk_tail: {device_name()}, commit {git_commit()}, {sms} SMs, median of {args.iters}, TF/s "
              "(model us in brackets)", flush=True)
        for s in shapes_named(args.shapes):
            a_shape, b_shape, out_shape = s.operand_shapes()
            shape = gemm.gemm_shape(s.layout, a_shape, b_shape)
            tm, tn, ks = gemm.tile_counts(shape, 256)
            tiles, q = tm * tn, tm * tn // sms
            sets = [(random_bf16(a_shape, 2 * i + 1), random_bf16(b_shape, 2 * i + 2)) for i in range(2)]
            outs = {}
            fns, model = {}, {}

            def add(name, call, seconds):
                outs[name] = cupy.full(out_shape, np.nan, dtype=bfloat16)
                o = outs[name]
                fns[name] = lambda i, call=call, o=o: call(*sets[i % 2], o)
                model[name] = seconds

            add("cuBLAS", lambda a, b, o: bench_gemm.cublas_fn(s.layout, a, b, o)(), None)
            for w in gemm.TILE_WIDTHS:
                wm, wn, _ = gemm.tile_counts(shape, w)
                add(f"w{w}", lambda a, b, o, w=w: gemm.matmul(a, b, s.layout, out=o, tile_n=w),
                    gemm.whole_tile_seconds(wm * wn, sms, ks, w))
            cur = gemm.stream_k_split(tiles, sms, ks)
            if cur is not None:
                p = gemm.get_plan(shape, bfloat16, split_k=1, stream_k=True)
                add(f"sk(f{cur.full},r{cur.ranges})", lambda a, b, o, p=p: p(a, b, o), cur.seconds(sms))
            for r in (2, 3, 4):
                alt = gemm.StreamKSplit(q * sms, tiles - q * sms, r, ks)
                if alt.tail == 0 or ks - (r - 1) * alt.per < gemm.MIN_SLABS_PER_RANGE or alt == cur:
                    continue
                p = split_plan(shape, alt, sms + r)
                add(f"sk_q{r}", lambda a, b, o, p=p: p(a, b, o), alt.seconds(sms))
            t = time_calls(world, fns, 3, args.iters)
            # whole tiles of every width bitwise w256's; K-ranges round differently: within 1e-2 of it
            want = outs["w256"].view(np.uint16).get()
            ref = bf16_to_f32(outs["w256"])
            tf = {k: s.flops / v.median_ms / 1e9 for k, v in t.items()}
            bad = [k for k in fns if k.startswith("w") and not np.array_equal(outs[k].view(np.uint16).get(), want)]
            bad += [k for k in fns if k.startswith("sk") and not float(
                cupy.linalg.norm(bf16_to_f32(outs[k]) - ref) / cupy.linalg.norm(ref)) < 1e-2]
            print(f"{s.layout} {s.name:22s} {tiles:4d} tiles {ks:3d} slabs  " + "  ".join(
                f"{k} {tf[k]:6.1f}" + (f" [{model[k] * 1e6:.0f}]" if model[k] else "") for k in fns)
                + (f"  WRONG (against w256): {bad}" if bad else ""), flush=True)
            rows.append({"layout": s.layout, "shape": s.name, "m": s.m, "n": s.n, "k": s.k, "tiles": tiles,
                         "k_slabs": ks, "tflops": tf, "model_us": {k: v * 1e6 for k, v in model.items() if v},
                         "bitwise": not bad})
            outs.clear()
            cupy.get_default_memory_pool().free_all_blocks()
    if args.out:
        args.out.write_text(json.dumps({"gpu": device_name(), "commit": git_commit(), "sms": sms, "rows": rows},
                                       indent=1))


if __name__ == "__main__":
    main()
