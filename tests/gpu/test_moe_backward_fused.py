"""GPU tests of kosmos.moe.backward.MoEBackward (the experts' backward in one launch) at any world size.

The exact oracle is the same plans run as separate launches, as MoELayer's device path runs them
(MoEDispatch with weighted rows, grouped_matmul NT for wgrad2, NN with the SwiGLU backward
epilogue, NT for wgrad1, NN for dgrad1, MoECombine with weights 1): dx, dW1 and dW2 must be bitwise
theirs, with any crew of movers and combine CTAs, in fp32 and bf16 weight gradients, on rerun too.
(Those launches are checked against float64 in test_moe_layer.py.) Outputs are poisoned with NaN
before each call; a rank arrives late; every other call is skewed towards one expert; "big" gives
every CTA several tiles of each GEMM; a third call leaves an expert without rows (its dW are zero).
With the shared experts' MLP as jobs of the launch, its gradients and its dx (added into `extra`)
must be bitwise what the standalone GEMMs give, as MoELayer's device path runs them (whole tiles,
no stream-K).
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from kosmos import gemm, grouped  # noqa: E402
from kosmos.dtypes import bfloat16  # noqa: E402
from kosmos.moe import MoECombine, MoEConfig, MoEDispatch, route  # noqa: E402
from kosmos.moe.backward import MoEBackward, RouterBackward  # noqa: E402
from kosmos.moe.layer import _backward_kernels  # noqa: E402
from kosmos.moe.router_grads import launch_router_grads, router_grads_record  # noqa: E402
from kosmos.moe.forward import SharedMLP  # noqa: E402

from .conftest import rank_input  # noqa: E402


def _bits(a):
    return cupy.asnumpy(a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32))


def _nan(a):
    a.view(np.uint8).fill(0xFF)
    return a


class Case:
    def __init__(self, world, width, wgrad_dtype):
        self.world, self.big, self.wdt = world, width == "big", np.dtype(wgrad_dtype)
        self.h, self.f = (512, 256) if self.big else (128, 64)
        self.cfg = MoEConfig(experts=4 * world.size, top_k=2, hidden=self.h, intermediate=self.f, aux_loss_coef=0.01,
                             z_loss_coef=0.001)  # (the losses: for the router's backward)
        self.e_loc = self.cfg.experts // world.size
        self.max_t = 4096 if self.big else 200
        self.cap = world.size * self.max_t * self.cfg.top_k
        self.disp = MoEDispatch(world, self.cfg.experts, 2 * self.h, capacity_rows=self.cap)
        self.disp_bwd = MoEDispatch(world, self.cfg.experts, 2 * self.h, capacity_rows=self.cap)
        self.comb = MoECombine(world, self.cfg.experts, self.h, self.max_t, self.cfg.top_k)
        self.bwd = MoEBackward(self.disp_bwd, self.comb, self.wdt)
        r = world.rank
        self.w1 = cupy.asarray((rank_input(90, r, (self.e_loc, 2 * self.f, self.h), np.float32) * 0.1).astype(bfloat16))
        self.w2 = cupy.asarray((rank_input(91, r, (self.e_loc, self.h, self.f), np.float32) * 0.1).astype(bfloat16))

    def close(self):
        for p in (self.disp, self.disp_bwd, self.comb):
            p.close()

    def forward(self, seed, empty_expert=False):
        """A forward's saved tensors (separate launches): x_e (the arena), a, gate_up, and dy.
        empty_expert: no token picks expert 1 (rank 0's second): a group of zero rows."""
        w = self.world
        if self.big:
            t = self.max_t - 700 * (w.rank % 2) - seed % 3
        else:
            t = 0 if (w.size > 1 and w.rank == w.size - 1) else 50 + 29 * w.rank + seed % 5
        x = self.x = cupy.asarray(rank_input(seed, w.rank, (t, self.h), np.float32).astype(bfloat16))
        logits = rank_input(seed + 1, w.rank, (t, 64), np.float32)
        logits[:, 0] += 3.0 * (seed % 2)  # every other call skewed towards expert 0 (rank 0's)
        if empty_expert:
            logits[:, 1] -= 1e4
        self.logits = cupy.asarray(logits)
        rt = route(self.logits, self.cfg)
        arena, rows, _ = self.disp(x, rt)
        x_e = arena.view(bfloat16)
        kept = cupy.empty((self.cap, 2 * self.f), bfloat16)
        a = grouped.grouped_matmul(x_e, self.w1, rows, "TN", epilogue="swiglu", gate_up=kept)
        dy = cupy.asarray(rank_input(seed + 2, w.rank, (t, self.h), np.float32).astype(bfloat16))
        return rt, x_e, a, kept, dy, rows

    def separate(self, rt, x_e, a, kept, dy, extra):
        """The oracle: MoELayer's device-path backward as separate launches."""
        arena, rows, _ = self.disp_bwd(dy, rt, weighted=True)
        d_ye = arena.view(bfloat16)
        dw2 = grouped.grouped_matmul(d_ye, a, rows, "NT", out_dtype=self.wdt)
        d_pre = grouped.grouped_matmul(d_ye, self.w2, rows, "NN", epilogue="swiglu_backward", gate_up=kept)
        dw1 = grouped.grouped_matmul(d_pre, x_e, rows, "NT", out_dtype=self.wdt)
        d_xe = grouped.grouped_matmul(d_pre, self.w1, rows, "NN")
        ones = dataclasses.replace(rt, weights=cupy.ones_like(rt.weights))
        dx = self.comb(d_xe, self.disp_bwd, ones, shared=extra)
        return dx, dw1, dw2


@pytest.mark.parametrize("width,wgrad,crews", [
    ("small", np.float32, [(1, 0), (None, None), (0, 0), (16, 0), ("all", "all but one")]),
    ("small", bfloat16, [(None, None)]),
    ("big", np.float32, [(None, None), (16, 0), (1, 0), (0, "all but one")])])
def test_backward_is_bitwise_the_separate_launches(world, width, wgrad, crews):
    case = Case(world, width, wgrad)
    grid = case.bwd.grid
    size = {None: None, 1: 1, 0: 0, 16: min(16, grid - 1), "all": grid, "all but one": grid - 1}
    try:
        failed = []  # collected, so that one rank's failure does not leave the others in a collective
        for c, (movers, crew) in enumerate(crews):
            rt, x_e, a, kept, dy, rows = case.forward(40 + c, empty_expert=c == 2)
            t = dy.shape[0]
            extra = cupy.asarray(rank_input(50 + c, world.rank, (t, case.h), np.float32)) if c == 1 else None
            want = case.separate(rt, x_e, a, kept, dy, extra)
            if c == 1 and world.rank == world.size - 1:
                cupy.cuda.Device().synchronize()
                time.sleep(0.5)  # a late rank
            out = _nan(cupy.empty((t, case.h), bfloat16))
            dw1 = _nan(cupy.empty((case.e_loc, 2 * case.f, case.h), case.wdt))
            dw2 = _nan(cupy.empty((case.e_loc, case.h, case.f), case.wdt))
            got = case.bwd(dy, rt, x_e, a, kept, case.w1, case.w2, extra=extra, out=out, dw1=dw1, dw2=dw2,
                           movers=size[movers], crew=size[crew], check=True)
            assert got[0] is out and got[1] is dw1 and got[2] is dw2
            for name, g, w in zip(("dx", "dW1", "dW2"), got, want):
                if not (_bits(g) == _bits(w)).all():
                    failed.append(f"call {c} (movers {movers}, crew {crew}): {name} is not bitwise the separate launches'")
            if c == len(crews) - 1:  # a rerun on the same inputs
                again = case.bwd(dy, rt, x_e, a, kept, case.w1, case.w2, extra=extra)
                for name, g, w in zip(("dx", "dW1", "dW2"), again, got):
                    if not (_bits(g) == _bits(w)).all():
                        failed.append(f"rerun: {name} differs")
        everyone = world.comm.allgather(failed)
        assert not any(everyone), f"rank {world.rank}: {failed}; all ranks: {everyone}"
    finally:
        case.close()


def test_backward_refuses_bad_arguments_on_every_rank(world):
    """A w1 of the wrong shape, or a strided dw1 to write, on rank 0: rank 0 raises ValueError, every
    other rank KosmosError (nothing moved), and the next call is right again."""
    from kosmos.errors import KosmosError

    case = Case(world, "small", np.float32)
    try:
        rt, x_e, a, kept, dy, rows = case.forward(60)
        strided = cupy.empty((*case.w1.shape[:2], 2 * case.w1.shape[2]), np.float32)[:, :, ::2]
        for what, kw in (("w1 [.., .., 64]", dict(w1=cupy.ascontiguousarray(case.w1[:, :, :64]))),
                         ("strided dw1", dict(dw1=strided))):
            args = dict(w1=case.w1, dw1=None)
            if world.rank == 0:
                args.update(kw)
            err = None
            try:
                case.bwd(dy, rt, x_e, a, kept, args["w1"], case.w2, dw1=args["dw1"], check=True)
            except (ValueError, KosmosError) as e:
                err = e
            kinds = world.comm.allgather(type(err).__name__ if err is not None else None)
            assert kinds[0] == "ValueError" and all(k == "KosmosError" for k in kinds[1:]), (what, kinds)
        want = case.separate(rt, x_e, a, kept, dy, None)
        got = case.bwd(dy, rt, x_e, a, kept, case.w1, case.w2, check=True)
        bad = [n for n, g, w in zip(("dx", "dW1", "dW2"), got, want) if not (_bits(g) == _bits(w)).all()]
        everyone = world.comm.allgather(bad)
        assert not any(everyone), f"after a refused call: {everyone}"
    finally:
        case.close()


@pytest.mark.parametrize("width,wgrad", [("small", np.float32), ("small", bfloat16), ("big", np.float32)])
def test_backward_with_the_shared_mlp_is_bitwise_the_separate_launches(world, width, wgrad):
    """The shared MLP's four GEMMs as jobs of the launch (Fs = 2 F: two shared experts' width), under
    several crews; the last call passes no `extra` (the launch allocates the shared dx's sum)."""
    case = Case(world, width, wgrad)
    r, fs, h, grid = world.rank, 2 * case.f, case.h, case.bwd.grid
    sw1 = cupy.asarray((rank_input(94, 0, (2 * fs, h), np.float32) * 0.1).astype(bfloat16))
    sw2 = cupy.asarray((rank_input(95, 0, (h, fs), np.float32) * 0.1).astype(bfloat16))
    crews = [(None, None), (1, grid - 1), (grid, 0), (0, None)]
    try:
        failed = []
        for c, (movers, crew) in enumerate(crews):
            rt, x_e, a, kept, dy, rows = case.forward(70 + c)
            x, t = case.x, dy.shape[0]
            given = c < 3  # the router's dx, or none
            extra0 = cupy.asarray(rank_input(80 + c, r, (t, h), np.float32)) if given else cupy.zeros((t, h), np.float32)
            gate_up = cupy.empty((t, 2 * fs), bfloat16)
            want_extra = extra0.copy()
            want_s = [cupy.zeros((2 * fs, h), case.wdt), cupy.zeros((h, fs), case.wdt)]
            h_s = None
            if t:  # the oracle: layer.py _shared_backward's GEMMs
                h_s = gemm.matmul(x, sw1, "TN", epilogue="swiglu", gate_up=gate_up)
                gemm.matmul(dy, h_s, "NT", out=want_s[1], stream_k=False)
                d_pre = gemm.matmul(dy, sw2, "NN", epilogue="swiglu_backward", gate_up=gate_up)
                gemm.matmul(d_pre, x, "NT", out=want_s[0], stream_k=False)
                gemm.matmul(d_pre, sw1, "NN", out=want_extra, epilogue="accumulate")
            want = case.separate(rt, x_e, a, kept, dy, want_extra)
            if c == 1 and r == world.size - 1:
                cupy.cuda.Device().synchronize()
                time.sleep(0.5)  # a late rank
            extra = extra0.copy() if given else None
            out = _nan(cupy.empty((t, h), bfloat16))
            got = case.bwd(dy, rt, x_e, a, kept, case.w1, case.w2, extra=extra, out=out, check=True,
                           shared=SharedMLP(sw1, sw2, h_s, gate_up), x=x, movers=movers, crew=crew)
            names = ("dx", "dW1", "dW2", "shared dW1", "shared dW2", "extra (+ shared dx)")
            for name, g, w in zip(names, (*got[:5], extra if given else want_extra), (*want, *want_s, want_extra)):
                if g is None or g.shape != w.shape or not (_bits(g) == _bits(w)).all():
                    failed.append(f"call {c} (T {t}, movers {movers}, crew {crew}): {name} is not bitwise the "
                                  "separate launches'")
            if t and not bool(cupy.isfinite(got[3]).all() and cupy.abs(got[3]).max() > 0):
                failed.append(f"call {c}: the shared dW1 is not finite and nonzero")
        everyone = world.comm.allgather(failed)
        assert not any(everyone), f"rank {r}: {failed}; all ranks: {everyone}"
    finally:
        case.close()


def test_backward_refuses_bad_shared_arguments_on_every_rank(world):
    """A shared.w1 of the wrong shape on rank 0, or x without shared: that rank raises ValueError, the
    others KosmosError (nothing moved); an `extra` that overlaps dy is refused (the launch adds into
    it); the next call is right again."""
    from kosmos.errors import KosmosError

    case = Case(world, "small", np.float32)
    r, fs, h = world.rank, 2 * case.f, case.h
    sw1 = cupy.asarray((rank_input(94, 0, (2 * fs, h), np.float32) * 0.1).astype(bfloat16))
    sw2 = cupy.asarray((rank_input(95, 0, (h, fs), np.float32) * 0.1).astype(bfloat16))
    try:
        rt, x_e, a, kept, dy, rows = case.forward(90)
        x, t = case.x, dy.shape[0]
        gate_up = cupy.empty((t, 2 * fs), bfloat16)
        h_s = gemm.matmul(x, sw1, "TN", epilogue="swiglu", gate_up=gate_up) if t else cupy.empty((0, fs), bfloat16)
        both = cupy.empty((t, h), np.float32)
        dy_in_both = both.view(bfloat16).reshape(-1)[:t * h].reshape(t, h)  # dy in extra's first half
        dy_in_both[...] = dy
        bad = [dict(shared=SharedMLP(sw1[:, :64].copy(), sw2, h_s, gate_up), x=x),
               dict(shared=None, x=x),
               dict(shared=SharedMLP(sw1, sw2, h_s, gate_up), x=x, extra=both, dy=dy_in_both)]
        for c, kw in enumerate(bad):
            args = dict(shared=SharedMLP(sw1, sw2, h_s, gate_up), x=x, extra=None, dy=dy)
            if r == 0:
                args.update(kw)
            err = None
            try:
                d = args.pop("dy")
                case.bwd(d, rt, x_e, a, kept, case.w1, case.w2, check=True, **args)
            except (ValueError, KosmosError) as e:
                err = e
            kinds = world.comm.allgather(type(err).__name__ if err is not None else None)
            assert kinds[0] == "ValueError" and all(k == "KosmosError" for k in kinds[1:]), (c, kinds)
        want = case.separate(rt, x_e, a, kept, dy, None)
        got = case.bwd(dy, rt, x_e, a, kept, case.w1, case.w2, check=True)
        bad = [n for n, g, w in zip(("dx", "dW1", "dW2"), got, want) if not (_bits(g) == _bits(w)).all()]
        everyone = world.comm.allgather(bad)
        assert not any(everyone), f"after refused calls: {everyone}"
    finally:
        case.close()


def test_backward_with_the_router_is_bitwise_the_separate_launches(world):
    """The router's backward inside the launch (d w and d logits per token, then dWr and dx as jobs,
    dx under the fold's sum) against its standalone kernel and whole-tile GEMMs, aux and z losses
    on; the last rank has no tokens at world > 1. Then refusals: a router's backward without own_y
    after a combine that left the own rows in place (every rank), a router_w that is not padded to
    64 rows, and `extra` beside `router`, on rank 0."""
    from kosmos.errors import KosmosError

    case = Case(world, "small", np.float32)
    r, h, e = world.rank, case.h, case.cfg.experts
    wr = cupy.zeros((64, h), bfloat16)
    wr[:e] = cupy.asarray((rank_input(96, 0, (e, h), np.float32) * 0.1).astype(bfloat16))
    comb = case.comb.comb.local
    kernels = _backward_kernels(world)  # (a collective: every rank, tokens or not)
    try:
        failed = []
        for c in range(2):
            rt, x_e, a, kept, dy, rows = case.forward(100 + c)
            x, t = case.x, dy.shape[0]
            saved = comb.copy()  # the forward's rows, as the router's backward reads them
            want_extra, want_dwr = None, cupy.zeros((e, h), np.float32)
            if t:
                d_logits = cupy.empty((t, 64), bfloat16)
                launch_router_grads(router_grads_record(
                    case.cfg, logits=case.logits, chosen=rt.experts, start=rt.start, hidden=h, comb=comb, slot=rt.slot,
                    dy=dy, status=case.disp.status, d_logits=d_logits), kernels)
                want_extra = gemm.matmul(d_logits, wr, "NN", out_dtype=np.float32, stream_k=False)
                want_dwr = gemm.matmul(d_logits, x, "NT", out_dtype=np.float32, stream_k=False)[:e]
            want = case.separate(rt, x_e, a, kept, dy, want_extra)
            comb[...] = saved
            if c == 1 and r == world.size - 1:
                cupy.cuda.Device().synchronize()
                time.sleep(0.5)  # a late rank
            out = _nan(cupy.empty((t, h), bfloat16))
            got = case.bwd(dy, rt, x_e, a, kept, case.w1, case.w2, out=out, check=True, x=x,
                           router=RouterBackward(case.cfg, case.logits, wr, case.disp.status))
            for name, g, w in zip(("dx", "dW1", "dW2", "dWr"), (*got[:3], got.d_router_w), (*want, want_dwr)):
                if g is None or g.shape != w.shape or not (_bits(g) == _bits(w)).all():
                    failed.append(f"call {c} (T {t}): {name} is not bitwise the separate launches'")
            if t and not bool(cupy.isfinite(got.d_router_w).all() and cupy.abs(got.d_router_w).max() > 0):
                failed.append(f"call {c}: dWr is not finite and nonzero")
        everyone = world.comm.allgather(failed)
        assert not any(everyone), f"rank {r}: {failed}; all ranks: {everyone}"

        rt, x_e, a, kept, dy, rows = case.forward(110)
        x, t = case.x, dy.shape[0]
        # the launches above left each rank's own rows out of the combine buffer: a router's backward
        # that would read them there (no own_y) is refused, on every rank
        with pytest.raises(ValueError, match="own rows in place"):
            case.bwd(dy, rt, x_e, a, kept, case.w1, case.w2, check=True, x=x,
                     router=RouterBackward(case.cfg, case.logits, wr, case.disp.status))
        for c, bad in enumerate(({"router": RouterBackward(case.cfg, case.logits, wr[:32].copy(), case.disp.status)},
                                 {"extra": cupy.zeros((t, h), np.float32)})):
            # a copying combine first, so the buffer holds every row again (a launch's combine
            # leaves this rank's own rows out of it, and a router's backward without own_y is
            # refused after that)
            case.separate(rt, x_e, a, kept, dy, None)
            args = {"router": RouterBackward(case.cfg, case.logits, wr, case.disp.status), "x": x}
            if r == 0:
                args.update(bad)
            err = None
            try:
                case.bwd(dy, rt, x_e, a, kept, case.w1, case.w2, check=True, **args)
            except (ValueError, KosmosError) as ex:
                err = ex
            kinds = world.comm.allgather(type(err).__name__ if err is not None else None)
            assert kinds[0] == "ValueError" and all(k == "KosmosError" for k in kinds[1:]), (c, kinds)
    finally:
        case.close()


def test_a_repeated_call_takes_its_arguments_from_the_memo(world, monkeypatch):
    """A call that passes every output, with the router's backward, whose arrays' signatures were
    seen before skips the checks and the records (MoEBackward's memo; its device records are not
    put again either): the same bits as the checked call that made them (and the outputs it was
    given, dWr the first E rows of its [E_pad, H])."""
    case = Case(world, "small", np.float32)
    h, e = case.h, case.cfg.experts
    wr = cupy.zeros((64, h), bfloat16)
    wr[:e] = cupy.asarray((rank_input(97, 0, (e, h), np.float32) * 0.1).astype(bfloat16))
    comb = case.comb.comb.local
    try:
        rt, x_e, a, kept, dy, rows = case.forward(120)
        x, t = case.x, dy.shape[0]
        outs = {"out": cupy.empty((t, h), bfloat16), "dw1": cupy.empty((case.e_loc, 2 * case.f, h), np.float32),
                "dw2": cupy.empty((case.e_loc, h, case.f), np.float32), "d_router_w": cupy.empty((64, h), np.float32)}
        router = RouterBackward(case.cfg, case.logits, wr, case.disp.status)
        saved = comb.copy()  # what the router's backward reads
        first = case.bwd(dy, rt, x_e, a, kept, case.w1, case.w2, x=x, router=router, check=True, **outs)
        first = [_bits(g) for g in (*first[:3], first.d_router_w)]
        # a copying combine (the launch's left this rank's own rows out of the buffer), then the
        # buffer as the first call found it
        case.separate(rt, x_e, a, kept, dy, None)
        comb[...] = saved

        def missed(*args, **kwargs):  # a refusal: the rank still launches (moving nothing), no peer waits
            raise ValueError("the memo missed a call it has seen")

        if t:  # (a rank without tokens takes the checked path: its outputs are zeroed per call)
            monkeypatch.setattr(MoEBackward, "_checked_heads", missed)
        for g in outs.values():
            _nan(g)
        again = case.bwd(dy, rt, x_e, a, kept, case.w1, case.w2, x=x, router=router, check=True, **outs)
        assert again.dx is outs["out"] and again.dw1 is outs["dw1"] and again.d_router_w.shape == (e, h)
        for name, g, w in zip(("dx", "dW1", "dW2", "dWr"), (*again[:3], again.d_router_w), first):
            assert (_bits(g) == w).all(), f"{name}: the memo's call differs from the checked one"
    finally:
        case.close()
