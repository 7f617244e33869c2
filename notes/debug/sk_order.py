"""Is forced stream-K's lead on the largest quick shapes real, or the contender order's?

Four H100 runs of bench/gemm.py --quick had stream-K forced ("sk") 2.5-11 % faster than whole
256-wide tiles ("w256") on NN/TN/NT 405B-FC1 and TN 405B-Down, where the wave model sees < 1 %
(notes/gemm.md, session 28). In bench/gemm.py's round "sk" runs right after "w128" (the narrow tile,
~35 % slower: a lighter load on the power budget) and "w256" right after the chosen path: with
40-90 ms calls, power management can favour a position in the round. Here the same shapes, the
same operands, in three orders (median of --iters, each a separate kosmos.timing.time_calls):
  w256, sk            sk, w256            w128, w256, w128, sk (each after the light one)
If sk's lead holds in every order, it is the kernel's; if it follows the position, the chooser
stays and bench/gemm.py's order needs care on long calls.

    python3 notes/debug/sk_order.py [--iters 8]
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kosmos import World, gemm  # noqa: E402
from kosmos.shapes import load_llama3_shapes  # noqa: E402
from kosmos.dtypes import bfloat16, random_bf16  # noqa: E402
from kosmos.timing import device_name, git_commit, time_calls  # noqa: E402

SHAPES = (("NN", "405B-FC1-MBS8"), ("TN", "405B-Down-MBS8"), ("TN", "405B-FC1-MBS8"), ("NT", "405B-FC1-MBS8"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=8)
    args = ap.parse_args()
    import cupy

    shapes = {(s.layout, s.name): s for s in load_llama3_shapes()}
    with World() as world:
        print(f"{device_name()}, commit {git_commit()}, median of {args.iters} after 2 of warm-up, TFLOP/s")
        for key in SHAPES:
            s = shapes[key]
            a_shape, b_shape, out_shape = s.operand_shapes()
            sets = [(random_bf16(a_shape, 2 * i + 1), random_bf16(b_shape, 2 * i + 2)) for i in range(2)]
            out = cupy.empty(out_shape, dtype=bfloat16)

            def call(**kw):
                def run(i):
                    a, b = sets[i % 2]
                    gemm.matmul(a, b, s.layout, out=out, **kw)
                return run
            w256, sk, w128 = call(tile_n=256), call(stream_k=True), call(tile_n=128)
            orders = {"w256, sk": {"w256": w256, "sk": sk}, "sk, w256": {"sk": sk, "w256": w256},
                      "w128 before each": {"w128 a": w128, "w256": w256, "w128 b": w128, "sk": sk}}
            line = []
            for label, fns in orders.items():
                t = time_calls(world, fns, 2, args.iters)  # rounds back to back, as bench/gemm.py queues them
                tf = {k: s.flops / v.median_ms / 1e9 for k, v in t.items()}
                line.append(f"[{label}] w256 {tf['w256']:6.1f} sk {tf['sk']:6.1f} sk/w256 {tf['sk'] / tf['w256']:.3f}")
            print(f"{s.layout} {s.name:16s} " + "  ".join(line), flush=True)
            del sets, out
            cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
