"""Forward and backward of a Llama-style MLP block with TP+SP fused kernels, checked in float64.

    launch/kosmosrun -np 4 --oversubscribe -- python3 launch/examples/mlp_block.py
    python3 launch/examples/mlp_block.py --hidden 1024 --ffn 2816 --tokens 512

out = FC2(swiglu(FC1(x))): FC1 a ColumnParallelLinear (AG+TN forward; bulk AG||NN and bulk
RS||NT backward), FC2 a RowParallelLinear (TN+RS forward; AG+NN backward). Each rank holds
`--tokens` tokens of the sequence (sequence parallel) and 1/P of each weight. Rank 0 then
recomputes the whole block on the host in float64 from every rank's inputs and weights and
every rank compares its outputs and gradients (relative Frobenius error, stated tolerance).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kosmos import World  # noqa: E402
from kosmos.dtypes import bf16_to_f32, f32_to_bf16, random_bf16  # noqa: E402
from kosmos.reference import rel_error  # noqa: E402
from kosmos.tp.layers import ColumnParallelLinear, RowParallelLinear  # noqa: E402

TOL = 3e-2  # bf16 activations rounded at every layer boundary, vs a float64 reference


def swiglu(y1):
    """[g | u] (bf16) -> silu(g) * u (bf16), and the float32 pieces the backward needs."""
    import cupy

    f = y1.shape[1] // 2
    g, u = bf16_to_f32(y1[:, :f]), bf16_to_f32(y1[:, f:])
    s = 1 / (1 + cupy.exp(-g))
    return f32_to_bf16(g * s * u), (g, u, s)


def swiglu_backward(dh, saved):
    import cupy

    g, u, s = saved
    d = bf16_to_f32(dh)
    dg = d * u * s * (1 + g * (1 - s))
    du = d * g * s
    return f32_to_bf16(cupy.ascontiguousarray(cupy.concatenate([dg, du], axis=1)))


def reference(xs, w1s, w2s, douts, P, f_local):
    """The whole block in float64 on the host: per-rank outputs and gradients."""
    X = np.concatenate(xs).astype(np.float64)                      # [P*m, H]
    W1g = np.concatenate([w[:f_local] for w in w1s]).astype(np.float64)   # [F, H]
    W1u = np.concatenate([w[f_local:] for w in w1s]).astype(np.float64)
    W2 = np.concatenate(w2s, axis=1).astype(np.float64)            # [H, F]
    G, U = X @ W1g.T, X @ W1u.T
    S = 1 / (1 + np.exp(-G))
    Hh = G * S * U
    OUT = Hh @ W2.T                                                # [P*m, H]
    D = np.concatenate(douts).astype(np.float64)
    dW2 = D.T @ Hh
    dH = D @ W2
    dG, dU = dH * U * S * (1 + G * (1 - S)), dH * G * S
    dX = dG @ W1g + dU @ W1u
    dW1g, dW1u = dG.T @ X, dU.T @ X
    m = xs[0].shape[0]
    out = []
    for r in range(P):
        rows, cols = slice(r * m, (r + 1) * m), slice(r * f_local, (r + 1) * f_local)
        out.append({"out": OUT[rows], "dx": dX[rows], "dw2": dW2[:, cols],
                    "dw1": np.concatenate([dW1g[cols], dW1u[cols]])})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--tokens", type=int, default=256, help="tokens per rank (a multiple of 128)")
    args = ap.parse_args(argv)
    import cupy

    with World() as world:
        P, r = world.size, world.rank
        H, F, m = args.hidden, args.ffn, args.tokens
        fc1 = ColumnParallelLinear(world, H, 2 * F, seed=1)   # rows: [gate shard; up shard]
        fc2 = RowParallelLinear(world, F, H, seed=2)
        x = random_bf16((m, H), 100 + r)
        dout = random_bf16((m, H), 200 + r)

        y1 = fc1.forward(x)                 # [P*m, 2F/P]
        h, saved = swiglu(y1)               # [P*m, F/P]
        out = fc2.forward(h)                # [m, H]
        dh, dw2 = fc2.backward(dout)        # [P*m, F/P], [H, F/P]
        dx, dw1 = fc1.backward(swiglu_backward(dh, saved))  # [m, H], [2F/P, H]
        world.synchronize()

        host = lambda a: cupy.asnumpy(a).astype(np.float64)  # noqa: E731
        gathered = world.comm.gather((cupy.asnumpy(x), cupy.asnumpy(fc1.weight), cupy.asnumpy(fc2.weight),
                                      cupy.asnumpy(dout)), root=0)
        refs = None
        if r == 0:
            xs, w1s, w2s, ds = zip(*gathered)
            refs = reference(xs, w1s, w2s, ds, P, F // P)
        ref = world.comm.scatter(refs, root=0)
        errs = {"out": rel_error(host(out), ref["out"]), "dx": rel_error(host(dx), ref["dx"]),
                "dw1": rel_error(host(dw1), ref["dw1"]), "dw2": rel_error(host(dw2), ref["dw2"])}
        every = world.comm.gather(errs, root=0)
        ok = all(e < TOL for e in errs.values())
        all_ok = world.comm.allreduce(int(ok), op=__import__("mpi4py").MPI.MIN)
        if r == 0:
            print(f"MLP block, {P} rank(s), hidden {H}, ffn {F}, {m} tokens per rank "
                  f"(relative error vs float64, tolerance {TOL:g}):")
            for rank, e in enumerate(every):
                print(f"  rank {rank}: " + "  ".join(f"{k} {v:.2e}" for k, v in e.items()))
            print("PASS" if all_ok else "FAIL")
        return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
