"""GPU tests of kosmos.moe.MoEForward (the experts' forward in one launch) at any world size.

The exact oracle is the same plans run as separate launches (MoEDispatch, grouped_matmul with the
SwiGLU epilogue, grouped_matmul, MoECombine): y, h and the kept pre-activations must be bitwise
theirs, with any crew of movers and combine CTAs, on rerun too (every other call with the shared
experts' MLP in the launch: its h and pre-activations bitwise our plain GEMMs'); y is also compared with a float64
NumPy forward of every rank's tokens. Outputs are poisoned with NaN before each call; calls run back
to back without a host sync; a rank arrives late; every other call is skewed towards one expert;
"big" gives every CTA several tiles of each GEMM. A refused input on one rank stops every rank.
With the routing inside the launch (LaunchRouting) the logits and the plan must be bitwise our
plain GEMM's and kosmos.moe.route's, and y the separate launches' on that plan.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from kosmos import gemm, grouped  # noqa: E402
from kosmos.dtypes import bfloat16  # noqa: E402
from kosmos.errors import KosmosError  # noqa: E402
from kosmos.moe import MoECombine, MoEConfig, MoEDispatch, reference, route  # noqa: E402
from kosmos.moe.forward import MoEForward, SharedMLP  # noqa: E402

from .conftest import rank_input  # noqa: E402


def _bits(a):
    return cupy.asnumpy(a.view(np.uint16))


def _nan(a):
    a.view(np.uint16).fill(0xFFFF)
    return a


class Case:
    def __init__(self, world, width):
        self.world, self.big = world, width == "big"
        self.h, self.f = (512, 256) if self.big else (128, 64)
        self.cfg = MoEConfig(experts=4 * world.size, top_k=2, hidden=self.h, intermediate=self.f)
        self.e_loc = self.cfg.experts // world.size
        self.max_t = 8192 if self.big else 200
        self.cap = world.size * self.max_t * self.cfg.top_k
        self.disp = MoEDispatch(world, self.cfg.experts, 2 * self.h, capacity_rows=self.cap)
        self.comb = MoECombine(world, self.cfg.experts, self.h, self.max_t, self.cfg.top_k)
        self.fwd = MoEForward(self.disp, self.comb)
        r = world.rank
        self.w1 = cupy.asarray((rank_input(90, r, (self.e_loc, 2 * self.f, self.h), np.float32) * 0.1).astype(bfloat16))
        self.w2 = cupy.asarray((rank_input(91, r, (self.e_loc, self.h, self.f), np.float32) * 0.1).astype(bfloat16))
        self.fs = 640 if self.big else 192  # the shared MLP's width: a half-masked last tile column
        self.sw1 = cupy.asarray((rank_input(92, r, (2 * self.fs, self.h), np.float32) * 0.1).astype(bfloat16))
        self.sw2 = cupy.asarray((rank_input(93, r, (self.h, self.fs), np.float32) * 0.1).astype(bfloat16))

    def close(self):
        for p in (self.disp, self.comb):
            p.close()

    def tokens(self, seed):
        w = self.world
        if self.big:
            t = self.max_t - 1000 * (w.rank % 2) - seed % 3
        else:
            t = 0 if (w.size > 1 and w.rank == w.size - 1) else 50 + 29 * w.rank + seed % 5
        x = rank_input(seed, w.rank, (t, self.h), np.float32).astype(bfloat16)
        logits = rank_input(seed + 1, w.rank, (t, 64), np.float32)
        logits[:, 0] += 3.0 * (seed % 2)  # every other call skewed towards expert 0 (rank 0's)
        return cupy.asarray(x), route(cupy.asarray(logits), self.cfg)

    def shared_mlp(self, t):
        """A SharedMLP of this case's weights with NaN-poisoned outputs for t tokens."""
        return SharedMLP(self.sw1, self.sw2, _nan(cupy.empty((t, self.fs), bfloat16)),
                         _nan(cupy.empty((t, 2 * self.fs), bfloat16)))

    def separate(self, x, rt, shared=False):
        """The oracle: the same plans as separate launches (the shared MLP: our plain GEMMs in whole
        tiles), and the shared MLP's (h, gate_up) or None."""
        arena, rows, _ = self.disp(x, rt)
        x_e = arena.view(bfloat16)
        kept = cupy.empty((self.cap, 2 * self.f), bfloat16)
        h = grouped.grouped_matmul(x_e, self.w1, rows, "TN", epilogue="swiglu", gate_up=kept)
        y_e = grouped.grouped_matmul(h, self.w2, rows, "TN")
        y_s = s_kept = None
        if shared and x.shape[0]:
            gu_s = cupy.empty((x.shape[0], 2 * self.fs), bfloat16)
            h_s = gemm.matmul(x, self.sw1, "TN", epilogue="swiglu", gate_up=gu_s)
            y_s, s_kept = gemm.matmul(h_s, self.sw2, "TN", out_dtype=np.float32, stream_k=False), (h_s, gu_s)
        y = self.comb(y_e, self.disp, rt, shared=y_s)
        return y, h, kept, int(rows.sum()), s_kept

    @staticmethod
    def separate_on(disp, comb, w1, w2, x, rt):
        """y of the separate launches on these plans and weights."""
        arena, rows, _ = disp(x, rt)
        h = grouped.grouped_matmul(arena.view(bfloat16), w1, rows, "TN", epilogue="swiglu")
        return comb(grouped.grouped_matmul(h, w2, rows, "TN"), disp, rt)

    def float64(self, x, rt, shared=False):
        """y of this rank's tokens in float64 from every rank's tokens, routings and weights."""
        comm = self.world.comm
        w1 = np.concatenate(comm.allgather(cupy.asnumpy(self.w1).astype(np.float64)))  # [E, 2F, H]
        w2 = np.concatenate(comm.allgather(cupy.asnumpy(self.w2).astype(np.float64)))
        xx, ex, wt = cupy.asnumpy(x).astype(np.float64), cupy.asnumpy(rt.experts), cupy.asnumpy(rt.weights)
        y = np.zeros(xx.shape)
        for e in np.unique(ex):
            t, j = np.nonzero(ex == e)
            a = xx[t] @ w1[e].T
            hh = a[:, :self.f] / (1.0 + np.exp(-a[:, :self.f])) * a[:, self.f:]
            np.add.at(y, t, wt[t, j][:, None] * (hh @ w2[e].T))
        if shared and len(xx):
            a = xx @ cupy.asnumpy(self.sw1).astype(np.float64).T
            hh = a[:, :self.fs] / (1.0 + np.exp(-a[:, :self.fs])) * a[:, self.fs:]
            y += hh @ cupy.asnumpy(self.sw2).astype(np.float64).T
        return y


@pytest.mark.parametrize("width,crews", [("small", [(1, 0), (None, None), (0, 0), (16, 0), ("all", "all but one")]),
                                         ("big", [(None, None), (16, 0), (1, 0), (0, "all but one")])])
def test_forward_is_bitwise_the_separate_launches(world, width, crews):
    case = Case(world, width)
    grid = case.fwd.grid
    size = {None: None, 1: 1, 0: 0, 16: min(16, grid - 1), "all": grid, "all but one": grid - 1}
    try:
        snaps = []
        for c, (movers, crew) in enumerate(crews):
            x, rt = case.tokens(20 + c)
            shared = c % 2 == 1
            want_y, want_h, want_kept, total, want_s = case.separate(x, rt, shared)
            if c == 1 and world.rank == world.size - 1:
                cupy.cuda.Device().synchronize()
                time.sleep(0.5)  # a late rank
            if case.fwd._h is not None:
                _nan(case.fwd._h)  # on my stream, before my launch
            out = _nan(cupy.empty((x.shape[0], case.h), bfloat16))
            kept = _nan(cupy.empty((case.cap, 2 * case.f), bfloat16))
            mlp = case.shared_mlp(x.shape[0]) if shared else None
            y, h = case.fwd(x, rt, case.w1, case.w2, gate_up=kept, shared=mlp, out=out,
                            movers=size[movers], crew=size[crew])
            assert y is out
            snaps.append((x, rt, shared, y.copy(), h.copy(), kept, want_y, want_h, want_kept, total, mlp, want_s))
        case.disp.check_status()
        refs = [case.float64(x, rt, shared) for x, rt, shared, *_ in snaps]  # collective: every rank, every call
        failed = []  # collected, so that one rank's failure does not leave the others in a collective
        for c, ((x, rt, shared, y, h, kept, want_y, want_h, want_kept, total, mlp, want_s), ref) in enumerate(
                zip(snaps, refs)):
            if want_s is not None and not ((_bits(mlp.h) == _bits(want_s[0])).all()
                                           and (_bits(mlp.gate_up) == _bits(want_s[1])).all()):
                failed.append(f"call {c}: the shared MLP's h or [gate, up] differ from the plain GEMM's")
            if not (_bits(y) == _bits(want_y)).all():
                failed.append(f"call {c}: y is not bitwise the separate launches'")
            if not (_bits(h)[:total] == _bits(want_h)[:total]).all():
                failed.append(f"call {c}: h differs")
            if not (_bits(kept)[:total] == _bits(want_kept)[:total]).all():
                failed.append(f"call {c}: kept [gate, up] differ")
            if not (_bits(kept)[total:] == 0xFFFF).all():
                failed.append(f"call {c}: pre-activations written past the rows")
            if x.shape[0]:
                got = cupy.asnumpy(y).astype(np.float64)
                err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
                if not err < 2e-2:
                    failed.append(f"call {c}: rel err {err:.2e} from float64")
        everyone = world.comm.allgather(failed)
        assert not any(everyone), f"rank {world.rank}: {failed}; all ranks: {everyone}"
        x, rt, shared, y0 = snaps[-1][:4]
        again, _ = case.fwd(x, rt, case.w1, case.w2, shared=case.shared_mlp(x.shape[0]) if shared else None)
        assert (_bits(again) == _bits(y0)).all(), "a rerun differs"
    finally:
        case.close()


def test_a_repeated_call_takes_its_arguments_from_the_memo(world, monkeypatch):
    """A call whose arrays' signatures were seen before skips the checks and the GEMMs' records
    (MoEForward._heads' memo): the same bits as the checked call that made them."""
    case = Case(world, "small")
    try:
        x, rt = case.tokens(40)
        mlp = case.shared_mlp(x.shape[0])
        kept = cupy.empty((case.cap, 2 * case.f), bfloat16)
        out = cupy.empty((x.shape[0], case.h), bfloat16)
        first = case.fwd(x, rt, case.w1, case.w2, gate_up=kept, shared=mlp, out=out)[0].copy()

        def missed(*args, **kwargs):
            raise AssertionError("the memo missed a call it has seen")  # every rank alike: no launch waits

        for name in ("_gemm_heads", "_shared_heads"):
            monkeypatch.setattr(type(case.fwd), name, missed)
        _nan(out)
        again, _ = case.fwd(x, rt, case.w1, case.w2, gate_up=kept, shared=mlp, out=out)
        case.disp.check_status()
        assert (_bits(again) == _bits(first)).all(), "the memo's call differs from the checked one"
    finally:
        case.close()


def test_a_refused_input_stops_every_rank(world):
    case = Case(world, "small")
    try:
        x, rt = case.tokens(8)
        bad = world.rank == 0
        with pytest.raises(TypeError if bad else KosmosError, match="w1" if bad else "refused"):
            case.fwd(x, rt, case.w1.astype(np.float32) if bad else case.w1, case.w2, check=True)
        if bad:
            world.synchronize()
        assert int(case.disp.status.get()[0]) == -1
        x, rt = case.tokens(10)
        mlp = case.shared_mlp(x.shape[0])
        if bad:  # the shared MLP's down projection one tile column short
            mlp.w2 = cupy.ascontiguousarray(case.sw2[:, :64])
        with pytest.raises(ValueError if bad else KosmosError, match="shared.w2" if bad else "refused"):
            case.fwd(x, rt, case.w1, case.w2, shared=mlp, check=True)
        if bad:
            world.synchronize()
        x, rt = case.tokens(9)
        want = case.separate(x, rt)[0]
        y, _ = case.fwd(x, rt, case.w1, case.w2, check=True)  # and the next call works
        assert (_bits(y) == _bits(want)).all()
        for kw in ({"movers": -1}, {"crew": case.fwd.grid}, {"movers": True}):  # refused on every rank
            with pytest.raises(ValueError, match=next(iter(kw))):
                case.fwd(x, rt, case.w1, case.w2, **kw)
        y, _ = case.fwd(x, rt, case.w1, case.w2, check=True)
        assert (_bits(y) == _bits(want)).all(), "after refusals"
    finally:
        case.close()


# The routing inside the launch (LaunchRouting): the router GEMM's logits must be bitwise our plain
# GEMM's (whole tiles), the plan bitwise kosmos.moe.route's on those logits, y bitwise the separate
# launches on that plan. Configs: softmax with both losses; sigmoid + bias + group-limited top-k.
# "many": more than 12 chunks per CTA (several routing rounds); the last rank of a world > 1 has no
# tokens in the small case; the token count changes from call to call (the buffers' tails are stale).
# "capacity": token dropping (the keep rule in the launch) with expert 1 far over capacity and
# integer-valued x and router weights, so many pairs tie on weight (the lower pair index is kept).
ROUTED = {
    "softmax": dict(score="softmax", top_k=2, aux_loss_coef=0.01, z_loss_coef=0.001),
    "grouped": dict(score="sigmoid", top_k=3, expert_bias=True, groups=4, topk_groups=2, scaling=2.5),
    "capacity": dict(score="softmax", top_k=2, aux_loss_coef=0.01, capacity_factor=0.6),
}


@pytest.mark.parametrize("rule", sorted(ROUTED))
@pytest.mark.parametrize("size", ["small", "big", "many"])
def test_routing_in_the_launch_is_route_bitwise(world, rule, size):
    from kosmos import gemm
    from kosmos.moe.route import LaunchRouting, router_splits

    if size == "many" and rule == "grouped":
        pytest.skip("softmax and capacity are enough for the rounds")
    P, r = world.size, world.rank
    # the router GEMM's K splits (router_splits): 4 at "small" (one tile, 16 slabs), 2 at "big", 1 at "many"
    h, f = {"small": (1024, 64), "big": (512, 256), "many": (128, 64)}[size]
    experts = 8 * P if rule == "grouped" else 4 * P
    cfg = MoEConfig(experts=experts, hidden=h, intermediate=f, **ROUTED[rule])
    e_loc = experts // P
    max_t = {"small": 200, "big": 8192, "many": 13 * 32 * 132 + 77}[size]
    cap = P * max_t * cfg.top_k
    disp = MoEDispatch(world, experts, 2 * h, capacity_rows=cap)
    comb = MoECombine(world, experts, h, max_t, cfg.top_k)
    fwd = MoEForward(disp, comb)
    lr = LaunchRouting(cfg, max_t)
    try:
        w1 = cupy.asarray((rank_input(90, r, (e_loc, 2 * f, h), np.float32) * 0.1).astype(bfloat16))
        w2 = cupy.asarray((rank_input(91, r, (e_loc, h, f), np.float32) * 0.1).astype(bfloat16))
        if cfg.capacity_factor:  # small integers: exact logits, tied weights; column 0 makes expert 1 hot
            wr_f = np.clip(np.round(rank_input(92, 0, (experts, h), np.float32)), -1, 1) / 4
            wr_f[:, 0], wr_f[1, 0] = 0.0, 1.0
        else:
            wr_f = rank_input(92, 0, (experts, h), np.float32) * 0.05
        wr = cupy.asarray(wr_f.astype(bfloat16))
        pad = cupy.zeros((lr.columns, h), bfloat16)
        pad[:experts] = wr
        bias = cupy.asarray(rank_input(93, 0, (experts,), np.float32) * 0.1) if cfg.expert_bias else None
        failed = []
        fields = ("experts", "weights", "order", "slot", "start", "losses") + (("kept",) if cfg.capacity_factor else ())
        for call in range(3):
            if size == "small":
                t = 0 if (P > 1 and r == P - 1) else 50 + 29 * r + 7 * call
            else:
                t = max_t - 1000 * call - 3 * r
            x_f = rank_input(40 + call, r, (t, h), np.float32)
            if cfg.capacity_factor:
                x_f = np.clip(np.round(x_f), -1, 1)
                x_f[:, 0] = 4.0
            x = cupy.asarray(x_f.astype(bfloat16))
            if call == 1 and r == P - 1:
                cupy.cuda.Device().synchronize()
                time.sleep(0.5)  # a late rank
            for a in (lr.logits, lr.weights, lr.losses):
                a.fill(np.nan)
            for a in (lr.experts, lr.order, lr.slot, lr.start):
                a.fill(-7)
            if lr.kept is not None:
                lr.kept.fill(True)
            out = _nan(cupy.empty((t, h), bfloat16))
            y, _ = fwd(x, lr, w1, w2, router_w=wr, bias=bias, out=out)
            got = lr.routing(t)
            if cfg.capacity_factor and (got.kept is not None) != (t * cfg.top_k > cfg.capacity_of(t)):
                failed.append(f"call {call} (T {t}): kept is {'None' if got.kept is None else 'set'}")
            got = {k: cupy.asnumpy(getattr(got, k)).copy() for k in fields if getattr(got, k) is not None}
            if "kept" in got:  # the rule itself, not only route()'s (which runs the same device code)
                want_kept = reference.capacity_keep(got["experts"].astype(np.int64),
                                                    got["weights"].astype(np.float64), cfg)
                if not (got["kept"] == want_kept).all():
                    failed.append(f"call {call} (T {t}): kept is not reference.capacity_keep")
            got["logits"] = cupy.asnumpy(lr.logits[:t, :experts])
            got["y"] = _bits(y).copy()
            # the oracle: our plain GEMM, route() and the separate launches on its plan
            splits = router_splits(t, lr.columns, h)  # the launch's K splits, summed alike
            logits = (gemm.matmul(x, pad, "TN", out_dtype=np.float32, stream_k=False, split_k=splits) if t
                      else cupy.empty((0, lr.columns), np.float32))
            rt = route(logits, cfg, bias)
            want_y = Case.separate_on(disp, comb, w1, w2, x, rt)
            want = {k: cupy.asnumpy(getattr(rt, k)) for k in fields if getattr(rt, k) is not None}
            if cfg.capacity_factor and t and (rt.kept is None or rt.kept.all()):
                failed.append(f"call {call} (T {t}): nothing dropped: the case tests nothing")
            want["logits"], want["y"] = cupy.asnumpy(logits[:, :experts]), _bits(want_y)
            if got.keys() != want.keys():
                failed.append(f"call {call} (T {t}): fields {sorted(got)} vs route()'s {sorted(want)}")
            for k in want.keys() & got.keys():
                if got[k].shape != want[k].shape or got[k].tobytes() != want[k].tobytes():
                    failed.append(f"call {call} (T {t}): {k} is not bitwise route()'s"
                                  + (f" ({got[k].tolist()} vs {want[k].tolist()})" if k == "losses" else ""))
        again, _ = fwd(x, lr, w1, w2, router_w=wr, bias=bias)
        if _bits(again).tobytes() != got["y"].tobytes():
            failed.append("a rerun differs")
        disp.check_status()
        everyone = world.comm.allgather(failed)
        assert not any(everyone), f"rank {r}: {failed}; all ranks: {everyone}"
    finally:
        disp.close()
        comb.close()


def test_routing_in_the_launch_refuses_bad_input(world):
    from kosmos.moe.route import LaunchRouting

    case = Case(world, "small")
    try:
        cfg = MoEConfig(experts=case.cfg.experts, top_k=2, hidden=case.h, intermediate=case.f, expert_bias=True)
        lr = LaunchRouting(cfg, case.max_t)
        x = cupy.asarray(rank_input(5, world.rank, (40, case.h), np.float32).astype(bfloat16))
        wr = cupy.asarray(rank_input(6, 0, (cfg.experts, case.h), np.float32).astype(bfloat16))
        bias = cupy.asarray(rank_input(7, 0, (cfg.experts,), np.float32))
        bad = world.rank == 0
        with pytest.raises(ValueError if bad else KosmosError, match="bias" if bad else "refused"):
            case.fwd(x, lr, case.w1, case.w2, router_w=wr, bias=None if bad else bias, check=True)
        if bad:
            world.synchronize()
        with pytest.raises(ValueError, match="router_w"):  # on every rank: a routing came with the call
            case.fwd(x, route(cupy.zeros((40, 64), np.float32), case.cfg), case.w1, case.w2, router_w=wr)
        big = cupy.asarray(rank_input(8, world.rank, (case.max_t + 1, case.h), np.float32).astype(bfloat16))
        with pytest.raises(ValueError, match="at most"):
            case.fwd(big, lr, case.w1, case.w2, router_w=wr, bias=bias)
        y, _ = case.fwd(x, lr, case.w1, case.w2, router_w=wr, bias=bias, check=True)  # and the next call works
        assert np.isfinite(cupy.asnumpy(y).astype(np.float32)).all()
    finally:
        case.close()
