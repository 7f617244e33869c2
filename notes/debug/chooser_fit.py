"""The wave model's constants from bench/gemm.py JSONs (issue 11's chooser refit; CPU only).

Per shape, every forced contender's time over w256's against the model's ratio (kosmos.gemm:
whole_tile_seconds, StreamKSplit.seconds) gives:
- TILE_EFFICIENCY[w] for w = 192, 128: the model's wave ratio (ceil(tiles_w / ctas) * w over
  ceil(tiles_256 / ctas) * 256) times t256 / t_w; medians over the shapes of >= --min-tiles tiles
  of 256 (wave-bound shapes mix the tail into the fit) and over all;
- stream-K's cost beyond its slab waves, in w256-slab units: (t_sk / t256 * whole waves' slabs -
  the split's waves' slabs) per partial (tail * (ranges - 1)), beside the model's charge
  (2 * PARTIAL_BYTES / REDUCE_BYTES_PER_S / SLAB_SECONDS) per partial.
The split is the one the JSON's commit timed (kosmos.gemm.stream_k_split of this tree: run it on the
same split rule). With the ping-pong 128 applied, w128 is it ("pp" rows are read as w128 too).

    python3 notes/debug/chooser_fit.py bench/results/gemm_*.json [--min-tiles 1000]
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kosmos import gemm  # noqa: E402
from kosmos.shapes import PaperShape  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("json", nargs="+")
    ap.add_argument("--min-tiles", type=int, default=1000)
    args = ap.parse_args()
    for path in args.json:
        d = json.load(open(path))
        ctas = int(d.get("sms") or 132)
        eff = {192: ([], []), 128: ([], []), "pp": ([], [])}
        sk_rows = []
        for r in d["results"]:
            ours = r["ours"]
            if "w256" not in ours:
                continue
            a_shape, b_shape, _ = PaperShape("", "", r["M"], r["N"], r["K"], r["layout"]).operand_shapes()
            shape = gemm.gemm_shape(r["layout"], a_shape, b_shape)
            tm, tn, ks = gemm.tile_counts(shape, 256)
            t256 = ours["w256"]["ms"]
            waves256 = -(-tm * tn // ctas)
            for name, w in (("w192", 192), ("w128", 128), ("pp", 128)):
                if name not in ours:
                    continue
                wm, wn, _ = gemm.tile_counts(shape, w)
                wave_ratio = -(-wm * wn // ctas) * w / (waves256 * 256)
                e = wave_ratio * t256 / ours[name]["ms"]
                key = w if name != "pp" else "pp"
                eff[key][1].append(e)
                if tm * tn >= args.min_tiles:
                    eff[key][0].append(e)
            sk = gemm.stream_k_split(tm * tn, ctas, ks)
            if "sk" in ours and sk is not None and sk.tail:
                slabs_whole = waves256 * ks
                slabs_sk = sk.full // ctas * ks + -(-sk.tail * sk.ranges // ctas) * sk.per
                partials = sk.tail * (sk.ranges - 1)
                extra = ours["sk"]["ms"] / t256 * slabs_whole - slabs_sk
                sk_rows.append((r["name"], r["layout"], tm * tn, ks, sk, extra / partials, ours["sk"]["ms"] / t256))
        print(f"== {path} ({d.get('gpu')}, {d.get('commit')}, {ctas} SMs)")
        for key, (big, every) in eff.items():
            if every:
                print(f"  TILE_EFFICIENCY[{key}]: median {statistics.median(big) if big else float('nan'):.3f} over "
                      f"{len(big)} shapes of >= {args.min_tiles} tiles; {statistics.median(every):.3f} over all {len(every)} "
                      f"(min {min(every):.3f}, max {max(every):.3f})")
        charge = 2 * gemm.PARTIAL_BYTES / gemm.REDUCE_BYTES_PER_S / gemm.SLAB_SECONDS
        print(f"  stream-K: slabs lost per partial, measured (the model charges {charge:.2f}):")
        for name, layout, tiles, ks, sk, per, ratio in sk_rows:
            print(f"    {name:22s} {layout} {tiles:5d} tiles {ks:4d} slabs full {sk.full} tail {sk.tail} r {sk.ranges}: "
                  f"{per:6.2f}  (sk / w256 time {ratio:.3f})")
        if sk_rows:
            print(f"    median {statistics.median(p for *_, p, _ in sk_rows):.2f}")


if __name__ == "__main__":
    main()
