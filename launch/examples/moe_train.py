"""Train a small MoE MLP block (router + routed experts + a shared expert) on synthetic data.

    launch/kosmosrun -np 2 --oversubscribe -- python3 launch/examples/moe_train.py      # kosmos.moe.MoELayer
    python3 launch/examples/moe_train.py --numpy --steps 100                          # the float64 NumPy run

Teacher-student: each step every rank draws its own tokens, the targets come from a fixed random
teacher block of the same shape, and the student (other random weights) learns them with Adam on
fp32 master weights; the loss is the mean squared error plus the router's aux loss. Experts are
expert-parallel (each rank trains its E/P), the router and the shared expert are replicated and
their gradients summed over ranks. `--numpy` runs the same model, data and optimiser in float64 on
the host (kosmos.moe.reference forward and backward, every rank's tokens in turn): on the GPU path
the first `--check` steps' losses are compared with it (relative tolerance --tol). The run fails
unless the loss fell by --min-drop. Initial weights and data come from NumPy seeds, so both paths
start from the same bf16 numbers.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kosmos.dtypes import bfloat16  # noqa: E402
from kosmos.moe import MoEConfig, reference  # noqa: E402

NAMES = ("router_w", "w1", "w2", "shared_w1", "shared_w2")
REPLICATED = ("router_w", "shared_w1", "shared_w2")  # gradients summed over ranks


def config(args) -> MoEConfig:
    return MoEConfig(experts=args.experts, top_k=args.top_k, hidden=args.hidden, intermediate=args.inter,
                     shared=1, aux_loss_coef=args.aux, name="moe-train")


def init(cfg: MoEConfig, seed: int, scale: float) -> dict[str, np.ndarray]:
    """Global weights (every expert), rounded to bf16, as float64."""
    rng = np.random.default_rng(seed)
    e, h, i, s = cfg.experts, cfg.hidden, cfg.intermediate, cfg.shared_width
    shapes = {"router_w": (e, h), "w1": (e, 2 * i, h), "w2": (e, h, i), "shared_w1": (2 * s, h),
              "shared_w2": (h, s)}
    return {n: (rng.standard_normal(shp) * scale).astype(bfloat16).astype(np.float64) for n, shp in shapes.items()}


def tokens(args, step: int, rank: int) -> np.ndarray:
    return np.random.default_rng([args.seed, step, rank]).standard_normal((args.tokens, args.hidden)).astype(
        bfloat16).astype(np.float64)


class Adam:
    def __init__(self, params: dict[str, object], lr: float, xp):
        self.lr, self.xp, self.t = lr, xp, 0
        self.m = {n: xp.zeros_like(p) for n, p in params.items()}
        self.v = {n: xp.zeros_like(p) for n, p in params.items()}

    def step(self, params: dict, grads: dict, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> None:
        self.t += 1
        for n, g in grads.items():
            self.m[n] = b1 * self.m[n] + (1 - b1) * g
            self.v[n] = b2 * self.v[n] + (1 - b2) * g * g
            mh, vh = self.m[n] / (1 - b1 ** self.t), self.v[n] / (1 - b2 ** self.t)
            params[n] -= self.lr * mh / (self.xp.sqrt(vh) + eps)


def loss_and_dy(y, target, xp):
    """0.5 * mean((y - t)^2) and its gradient."""
    d = y - target
    return 0.5 * float((d * d).mean()), d / d.size


def run_numpy(args, world_size: int, steps: int) -> list[float]:
    """The float64 reference run: the same model, data and Adam, every rank's tokens in turn."""
    cfg = config(args)
    teacher, student = init(cfg, 100, args.scale), init(cfg, 1, args.scale)
    opt = Adam(student, args.lr, np)
    losses = []
    for step in range(steps):
        grads = {n: np.zeros_like(p) for n, p in student.items()}
        total = 0.0
        for r in range(world_size):
            x = tokens(args, step, r)
            target, _ = reference.forward(x, teacher["router_w"], teacher["w1"], teacher["w2"], cfg, None,
                                          teacher["shared_w1"], teacher["shared_w2"])
            y, rt = reference.forward(x, student["router_w"], student["w1"], student["w2"], cfg, None,
                                      student["shared_w1"], student["shared_w2"])
            mse, dy = loss_and_dy(y, target, np)
            total += mse + rt.aux_loss
            g = reference.backward(x, student["router_w"], student["w1"], student["w2"], cfg, dy, None,
                                   student["shared_w1"], student["shared_w2"])
            for n, v in (("router_w", g.d_router_w), ("w1", g.dw1), ("w2", g.dw2), ("shared_w1", g.d_shared_w1),
                         ("shared_w2", g.d_shared_w2)):
                grads[n] += v
        opt.step(student, grads)
        losses.append(total / world_size)
    return losses


def run_kosmos(args) -> list[float]:
    import cupy
    from mpi4py import MPI

    from kosmos import World
    from kosmos.dtypes import bf16_to_f32, f32_to_bf16
    from kosmos.moe import MoELayer, MoEParams

    with World() as world:
        cfg = config(args)
        P, r = world.size, world.rank
        e_loc = cfg.local_experts(P)
        mine = slice(r * e_loc, (r + 1) * e_loc)

        def local(params: dict[str, np.ndarray]) -> dict:  # this rank's share, fp32 on the GPU
            return {n: cupy.asarray((v[mine] if n in ("w1", "w2") else v).astype(np.float32))
                    for n, v in params.items()}

        def as_params(p: dict) -> MoEParams:
            b = {n: f32_to_bf16(cupy.ascontiguousarray(v)) for n, v in p.items()}
            return MoEParams(b["router_w"], b["w1"], b["w2"], None, b["shared_w1"], b["shared_w2"])

        teacher = as_params(local(init(cfg, 100, args.scale)))
        student = local(init(cfg, 1, args.scale))
        opt = Adam(student, args.lr, cupy)
        layer = MoELayer(world, cfg, max_tokens=args.tokens, path=args.path)
        losses, g = [], None
        if r == 0:
            print(f"MoE block, {P} rank(s), MoELayer path {args.path!r}: E {cfg.experts}, top-{cfg.top_k}, "
                  f"H {cfg.hidden}, I {cfg.intermediate}, 1 shared expert, {args.tokens} tokens a rank a step",
                  flush=True)
        try:
            for step in range(args.steps):
                x = f32_to_bf16(cupy.asarray(tokens(args, step, r).astype(np.float32)))
                target, _ = layer.forward(x, teacher)
                sp = as_params(student)
                y, ctx = layer.forward(x, sp)
                mse, dy = loss_and_dy(bf16_to_f32(y), bf16_to_f32(target), cupy)
                aux = float(cupy.asnumpy(ctx.routing.losses)[0])
                g = layer.backward(f32_to_bf16(dy.astype(cupy.float32)), ctx, sp, out=g)  # last step's buffers
                grads = {"router_w": g.d_router_w, "w1": g.dw1, "w2": g.dw2, "shared_w1": g.d_shared_w1,
                         "shared_w2": g.d_shared_w2}
                for n in REPLICATED:  # replicated parameters: the ranks' gradients summed (host MPI: small)
                    grads[n] = cupy.asarray(world.comm.allreduce(cupy.asnumpy(grads[n]), op=MPI.SUM))
                opt.step(student, grads)
                losses.append(world.comm.allreduce(mse + aux, op=MPI.SUM) / P)
                if r == 0 and (step % args.log == 0 or step == args.steps - 1):
                    print(f"step {step:4d}  loss {losses[-1]:.6f}", flush=True)
        finally:
            layer.close()
        return losses if r == 0 else []


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numpy", action="store_true", help="the float64 NumPy run only (no GPU)")
    ap.add_argument("--world", type=int, default=1, help="--numpy: the world size to emulate")
    ap.add_argument("--path", choices=("fused", "device", "serial", "baseline"), default="fused",
                    help="MoELayer's path (fused: router to fold in one launch each way)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=256, help="tokens per rank per step")
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--inter", type=int, default=128)
    ap.add_argument("--aux", type=float, default=0.01)
    ap.add_argument("--scale", type=float, default=0.1, help="initial weights' standard deviation")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--log", type=int, default=20)
    ap.add_argument("--check", type=int, default=3, help="GPU path: steps compared with the NumPy run")
    ap.add_argument("--tol", type=float, default=3e-2)
    ap.add_argument("--min-drop", type=float, default=0.3, help="the loss must fall by this fraction")
    args = ap.parse_args(argv)
    if args.numpy:
        losses = run_numpy(args, args.world, args.steps)
        for s in range(0, args.steps, args.log):
            print(f"step {s:4d}  loss {losses[s]:.6f}")
    else:
        losses = run_kosmos(args)
        if not losses:
            return 0  # ranks other than 0 report nothing; rank 0 decides
        from mpi4py import MPI

        ref = run_numpy(args, MPI.COMM_WORLD.Get_size(), min(args.check, args.steps))
        for s, (got, want) in enumerate(zip(losses, ref)):
            ok = abs(got - want) <= args.tol * abs(want)
            print(f"step {s}: kosmos {got:.6f}  float64 {want:.6f}  {'ok' if ok else 'DIFFERS'}")
            if not ok:
                return 1
    drop = 1 - losses[-1] / losses[0]
    print(f"loss {losses[0]:.6f} -> {losses[-1]:.6f} ({drop:.0%} lower)")
    return 0 if drop >= args.min_drop else 1


if __name__ == "__main__":
    sys.exit(main())
