"""How far kosmos.gemm's automatic tiling is from the best forced one, per shape, from a
bench/gemm.py JSON (its contenders: the automatic plan at the full grid, w256 / w192 / w128 forced,
sk = stream-K forced). Prints the shapes where the automatic plan is more than --worse slower than
the best forced contender, the wave model's cost of each (kosmos.gemm.whole_tile_seconds,
StreamKSplit.seconds) beside the measured times, and per layout the geomean of auto / best.
CPU only: reads the JSON, runs the host's chooser.

    python3 notes/debug/chooser_check.py bench/results/gemm_*.json [--worse 0.03]
"""
import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kosmos import gemm  # noqa: E402
from kosmos.shapes import PaperShape  # noqa: E402


def model_costs(layout: str, m: int, n: int, k: int, ctas: int) -> dict[str, float]:
    a_shape, b_shape, _ = PaperShape("", "", m, n, k, layout).operand_shapes()
    shape = gemm.gemm_shape(layout, a_shape, b_shape)
    out = {}
    for w in gemm.TILE_WIDTHS:
        tm, tn, ks = gemm.tile_counts(shape, w)
        out[f"w{w}"] = gemm.whole_tile_seconds(tm * tn, ctas, ks, w)
    tm, tn, ks = gemm.tile_counts(shape, 256)
    sk = gemm.stream_k_split(tm * tn, ctas, ks)
    if sk is not None:
        out["sk"] = sk.seconds(ctas)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("json", nargs="+")
    ap.add_argument("--worse", type=float, default=0.03)
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
                model = model_costs(r["layout"], r["M"], r["N"], r["K"], ctas)
                cells = "  ".join(f"{c} {forced.get(c, float('nan')) * 1e3:7.1f}/{model.get(c, float('nan')) * 1e6:7.1f}"
                                  for c in ("w256", "w192", "w128", "sk"))
                print(f"  {r['name']:22s} {r['layout']} {r['M']}x{r['N']}x{r['K']}: auto {auto['ms'] * 1e3:7.1f} us "
                      f"(tile {r.get('tile_n')}), best {best} x{ratio:.3f} | measured/model us: {cells}")
        for layout, v in sorted(ratios.items()):
            g = math.exp(sum(math.log(x) for x in v) / len(v))
            print(f"  {layout}: auto / best forced geomean {g:.3f} over {len(v)} shapes, worst {max(v):.3f}")


if __name__ == "__main__":
    main()
