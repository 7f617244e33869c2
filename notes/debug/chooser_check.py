"""How far kosmos.gemm's automatic tiling is from the best forced one, per shape, from a
bench/gemm.py JSON (its contenders: the automatic plan at the full grid, w256 / w192 / w128 forced,
sk = stream-K forced). Prints the shapes where the automatic plan is more than --worse slower than
the best forced contender, the wave model's cost of each (kosmos.gemm.whole_tile_seconds,
StreamKSplit.seconds) beside the measured times, and per layout the geomean of auto / best.
Then the model's constants as the JSON's times give them (session 37): per shape, each forced
contender's time over w256's against the model's ratio gives
- TILE_EFFICIENCY[w] (w = 192, 128; "pp": the ping-pong 128 contender of session 36's runs): the
  wave ratio (ceil(tiles_w / ctas) w over ceil(tiles_256 / ctas) 256) times t256 / t_w, medians
  over the shapes of >= --min-tiles tiles of 256 (wave-bound shapes mix their tail into it) and all;
- stream-K's cost beyond its slab waves, in w256 slab-times a partial (tail x (ranges - 1)), beside
  the model's charge (2 PARTIAL_BYTES / REDUCE_BYTES_PER_S / SLAB_SECONDS); the split is this
  tree's stream_k_split's: read a JSON with the split rule of the tree that timed it.
CPU only: reads the JSON, runs the host's chooser.

    python3 notes/debug/chooser_check.py bench/results/gemm_*.json [--worse 0.03] [--min-tiles 1000]
"""
import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kosmos import gemm  # noqa: E402
from kosmos.shapes import PaperShape  # noqa: E402


def gemm_of(r: dict) -> "gemm.GemmShape":
    a_shape, b_shape, _ = PaperShape("", "", r["M"], r["N"], r["K"], r["layout"]).operand_shapes()
    return gemm.gemm_shape(r["layout"], a_shape, b_shape)


def model_costs(r: dict, ctas: int) -> dict[str, float]:
    shape = gemm_of(r)
    out = {}
    for w in gemm.TILE_WIDTHS:
        tm, tn, ks = gemm.tile_counts(shape, w)
        out[f"w{w}"] = gemm.whole_tile_seconds(tm * tn, ctas, ks, w)
    tm, tn, ks = gemm.tile_counts(shape, 256)
    sk = gemm.stream_k_split(tm * tn, ctas, ks)
    if sk is not None:
        out["sk"] = sk.seconds(ctas)
    return out


def fit(d: dict, ctas: int, min_tiles: int) -> None:
    """The model's constants from one JSON's forced contenders (see the module docstring)."""
    eff: dict = {192: ([], []), 128: ([], []), "pp": ([], [])}
    sk_rows = []
    for r in d["results"]:
        ours = r["ours"]
        if "w256" not in ours:
            continue
        shape = gemm_of(r)
        tm, tn, ks = gemm.tile_counts(shape, 256)
        t256 = ours["w256"]["ms"]
        waves256 = -(-tm * tn // ctas)
        for name, w in (("w192", 192), ("w128", 128), ("pp", 128)):
            if name in ours:
                wm, wn, _ = gemm.tile_counts(shape, w)
                e = -(-wm * wn // ctas) * w / (waves256 * 256) * t256 / ours[name]["ms"]
                big, every = eff[w if name != "pp" else "pp"]
                every.append(e)
                if tm * tn >= min_tiles:
                    big.append(e)
        sk = gemm.stream_k_split(tm * tn, ctas, ks)
        if "sk" in ours and sk is not None and sk.tail:
            slabs_sk = sk.full // ctas * ks + -(-sk.tail * sk.ranges // ctas) * sk.per
            lost = (ours["sk"]["ms"] / t256 * waves256 * ks - slabs_sk) / (sk.tail * (sk.ranges - 1))
            sk_rows.append((r["name"], r["layout"], tm * tn, ks, sk, lost, ours["sk"]["ms"] / t256))
    for key, (big, every) in eff.items():
        if every:
            print(f"  TILE_EFFICIENCY[{key}]: median {statistics.median(big) if big else float('nan'):.3f} over "
                  f"{len(big)} shapes of >= {min_tiles} tiles; {statistics.median(every):.3f} over all {len(every)} "
                  f"(min {min(every):.3f}, max {max(every):.3f})")
    charge = 2 * gemm.PARTIAL_BYTES / gemm.REDUCE_BYTES_PER_S / gemm.SLAB_SECONDS
    print(f"  stream-K: slab-times lost a partial, measured (the model charges {charge:.2f}):")
    for name, layout, tiles, ks, sk, lost, ratio in sk_rows:
        print(f"    {name:22s} {layout} {tiles:5d} tiles {ks:4d} slabs full {sk.full} tail {sk.tail} r {sk.ranges}: "
              f"{lost:6.2f}  (sk / w256 time {ratio:.3f})")
    if sk_rows:
        print(f"    median {statistics.median(row[5] for row in sk_rows):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("json", nargs="+")
    ap.add_argument("--worse", type=float, default=0.03)
    ap.add_argument("--min-tiles", type=int, default=1000)
    args = ap.parse_args()
    for path in args.json:
        d = json.load(open(path))
        ctas = int(d.get("sms") or 132)
        print(f"== {path} ({d.get('gpu')}, {d.get('commit')}, {ctas} SMs)")
        ratios: dict[str, list[float]] = {}
        for r in d["results"]:
            ours = r["ours"]
            auto = ours.get(str(ctas))
            forced = {name: v["ms"] for name, v in ours.items() if name in ("w256", "w192", "w128", "sk")}
            if auto is None or not forced:
                continue
            best = min(forced, key=forced.get)
            ratio = auto["ms"] / forced[best]
            ratios.setdefault(r["layout"], []).append(ratio)
            if ratio > 1 + args.worse:
                model = model_costs(r, ctas)
                cells = "  ".join(f"{c} {forced.get(c, float('nan')) * 1e3:7.1f}/{model.get(c, float('nan')) * 1e6:7.1f}"
                                  for c in ("w256", "w192", "w128", "sk"))
                print(f"  {r['name']:22s} {r['layout']} {r['M']}x{r['N']}x{r['K']}: auto {auto['ms'] * 1e3:7.1f} us "
                      f"(tile {r.get('tile_n')}), best {best} x{ratio:.3f} | measured/model us: {cells}")
        for layout, v in sorted(ratios.items()):
            g = math.exp(sum(math.log(x) for x in v) / len(v))
            print(f"  {layout}: auto / best forced geomean {g:.3f} over {len(v)} shapes, worst {max(v):.3f}")
        fit(d, ctas, args.min_tiles)


if __name__ == "__main__":
    main()
