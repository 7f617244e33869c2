"""MoEBackward: the local experts' part of the MoE backward in one launch, the router's backward
and dY dispatch to dX fold.

MoELayer's path "fused" backward runs it (bitwise the device path's separate launches:
tests/gpu/test_moe_backward_fused.py, tests/gpu/test_moe_layer.py; at world 1 on the H200 it is
0.90-1.26x the device path's speed: notes/moe.md, session 20).

    bwd = MoEBackward(dispatch, combine, wgrad_dtype=np.float32)   # the layer's backward dispatch plan
    g = bwd(dy, routing, x_e, a, gate_up, w1, w2, extra=extra)     # g.dx, g.dw1, g.dw2 (BackwardGrads)
    g = bwd(..., shared=SharedMLP(sw1, sw2, h_s, gate_up_s), router=RouterBackward(cfg, logits, wr_pad,
            forward_status), x=x)                                    # + g.dw1_shared, g.dw2_shared, g.d_router_w

One persistent kernel (hipsrc/kosmos/moe/backward.h), on the forward's routing and saved tensors
(x_e: the forward's dispatch arena rows [capacity, H]; a = silu(gate) * up [capacity, I]; gate_up
[capacity, 2I]; the arena rows of this dispatch line up with them: same routing, same counts).
With `router`, every warp first takes a token: its pairs' combine-weight gradients from their
expert outputs, still in the combine buffer (or, for the rows this rank's own experts sent it,
where the forward's combine left them: RouterBackward.own_y), and its d logits
(kosmos/moe/router_grads.py); the grid meets (the combine below writes that buffer) and the
router's dWr and dx (stored into the fold's fp32 addend) become the builder call's first jobs. Then
the builders' idle warps push each pair's dY row, times its routing weight, to its expert's owner
beside one builder call over four GEMMs: dgrad2 with the SwiGLU backward in its epilogue (d_pre =
[dg, du], dA never stored) as the rows land, wgrad2 (dW2 = dY_e^T a_e), dgrad1 (dX_e = d_pre W1,
each tile once dgrad2 has finished its tile row) and wgrad1 (dW1 = d_pre^T x_e, each expert once
dgrad2 has finished all its rows); a crew pushes each dX row home as soon as its dgrad1 tile row is
done, the builders join it (the rows of this rank's own tokens are not copied: the fold reads them
in place); every rank then sums each token's k rows in fp32 with the addend (`extra`, or the
router's dx) and rounds once. With `shared` (the forward's SharedMLP: its h and gate_up now read)
the shared experts' MLP's backward runs as four more jobs of the same builder call (its dgrad2 with
the SwiGLU backward and its wgrad2 first, while dY lands; its dgrad1, added into the addend by the
TMA unit after the router's dx, and its wgrad1 last; the fold waits for the router's dx and the
shared dgrad1). The router's and the shared MLP's records live in device memory
(kosmos/runtime/records.py: the kernel's parameters would pass HIP's 4 KB). Weight gradients in
wgrad_dtype (float32 or bfloat16), the router's fp32.

After a dispatch that moved nothing (a routing past capacity, or a refused rank) dx is NaN and no
weight gradient is written, the shared MLP's included (MoELayer fills them with NaN; the router's
dWr comes back NaN); after a wait that gave up mid-call `extra` may hold part of the shared MLP's dx: check
`dispatch.check_status()` (or pass check=True).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..arrays import check_array, refuse_overlap
from ..dtypes import bfloat16, float32
from ..runtime.call_cache import CallCache, HeldBuffers, call_signature
from ..runtime.streams import uses_stream
from .combine import MoECombine
from .dispatch import MoEDispatch
from ..runtime.mirror import StructMirror
from ..runtime.records import DeviceRecord
from .config import MoEConfig
from .forward import ExpertsLaunch, SharedMLP
from .route import DeviceRouting
from .router_grads import ROUTER_GRADS_DTYPE, pair_starts, router_grads_record


def _shared_backward_dtype() -> np.dtype:
    """moe::SharedBackward<EpiW> (backward.h): four gemm::JobRecords (EpiW's record is EPI_DTYPE for
    both weight-gradient types)."""
    from .. import gemm

    jobs = [("dgrad2", gemm.job_record_dtype(gemm.SWIGLU_EPI_DTYPE))] + [
        (n, gemm.job_record_dtype(gemm.EPI_DTYPE)) for n in ("wgrad2", "dgrad1", "wgrad1")]
    size = jobs[0][1].itemsize  # every record is 512 B (64-byte multiples: they stack whole)
    assert all(dt.itemsize == size for _, dt in jobs)
    return np.dtype({"names": [n for n, _ in jobs], "formats": [d for _, d in jobs],
                     "offsets": [i * size for i in range(4)], "itemsize": 4 * size})


def _router_backward_dtype() -> np.dtype:
    """moe::RouterBackward (backward.h): dWr's and dx's gemm::JobRecords, then the RouterGrads."""
    from .. import gemm

    job = gemm.job_record_dtype(gemm.EPI_DTYPE)
    at = 2 * job.itemsize
    return np.dtype({"names": ["dw", "dx", "grads"], "formats": [job, job, ROUTER_GRADS_DTYPE],
                     "offsets": [0, job.itemsize, at], "itemsize": -(-(at + ROUTER_GRADS_DTYPE.itemsize) // 64) * 64})


SHARED_BACKWARD_DTYPE = _shared_backward_dtype()
ROUTER_BACKWARD_DTYPE = _router_backward_dtype()
MIRRORS = [*(StructMirror(f"kosmos::moe::SharedBackward<kosmos::gemm::{w}>", SHARED_BACKWARD_DTYPE, alignment=64)
             for w in ("EpiStoreF32", "EpiStoreBf16")),
           StructMirror("kosmos::moe::RouterBackward", ROUTER_BACKWARD_DTYPE, alignment=64)]


@dataclass
class RouterBackward:
    """The router's backward for MoEBackward (run first in its launch): the forward's rule (cfg:
    score, normalize, scaling, the loss coefficients) and logits [T, >= E] fp32, router_w padded to
    [E_pad, H] bf16 (E_pad: a multiple of 64, zero rows past E), the forward dispatch's status
    (int64: nonzero, it moved nothing), and start: the chosen pairs per expert as an [E + 1] prefix
    (router_grads.pair_starts; None: the routing's, or pair_starts where it dropped pairs)."""
    cfg: MoEConfig
    logits: Any
    router_w: Any
    status: Any
    start: Any = None
    own_y: Any = None     # the forward's expert outputs and its combine's own_runs, where the rows
    own_runs: Any = None  # its own experts sent this rank stayed (router_grads_record's)


class BackwardGrads(NamedTuple):
    """MoEBackward's results: dx [T, H] bf16, the routed experts' dW1 [E/P, 2I, H] and dW2 [E/P, H, I],
    the shared MLP's dW1_s [2 Fs, H] and dW2_s [H, Fs] (None without it), in wgrad_dtype, and the
    router's dWr [E, H] fp32 (None without it)."""
    dx: Any
    dw1: Any
    dw2: Any
    dw1_shared: Any = None
    dw2_shared: Any = None
    d_router_w: Any = None


class MoEBackward(ExpertsLaunch):
    crew_per_16 = 1  # a sixteenth of the grid combines at world > 1 (ExpertsLaunch._crews)

    def __init__(self, dispatch: MoEDispatch, combine: MoECombine, wgrad_dtype: Any = float32):
        import cupy

        wdt = np.dtype(wgrad_dtype)
        if wdt not in (np.dtype(float32), np.dtype(bfloat16)):
            raise TypeError(f"wgrad_dtype must be float32 or bfloat16, got {wdt}")
        from .. import gemm

        super().__init__(dispatch, combine, "kosmos_moe_backward_" + ("f32" if wdt == np.dtype(float32) else "bf16"), 10)
        self.wgrad_dtype = wdt
        self.epilogues = (gemm.SWIGLU_EPI_DTYPE, gemm.EPI_DTYPE, gemm.EPI_DTYPE, gemm.EPI_DTYPE)
        self._tmaps: tuple[dict, ...] = tuple({} for _ in range(10))
        self._heads_memo = CallCache(size=8)  # _checked_heads' results by _call_key
        # the launch's own buffers, bf16 unless said: "d_pre" [capacity, 2I] and "d_xe" [capacity, H],
        # dgrad2's and dgrad1's outputs; "d_pre_s" [max tokens, 2 Fs], the shared MLP's d[gate, up];
        # "d_logits" [max tokens, E_pad], the router's; "router_dx" [max tokens, H] fp32, the router's
        # dx (the fold's addend). A new one clears the memo: its records point into the old.
        self._held = HeldBuffers(on_new=self._heads_memo.clear)
        self._ones = cupy.ones(combine.max_tokens * combine.top_k, np.float32)
        self._shared_jobs = DeviceRecord(SHARED_BACKWARD_DTYPE)
        self._router_jobs = DeviceRecord(ROUTER_BACKWARD_DTYPE)

    @uses_stream
    def __call__(self, dy: Any, routing: DeviceRouting, x_e: Any, a: Any, gate_up: Any, w1: Any, w2: Any, *,
                 extra: Any = None, shared: SharedMLP | None = None, router: RouterBackward | None = None,
                 x: Any = None, out: Any = None, dw1: Any = None, dw2: Any = None, dw1_shared: Any = None,
                 dw2_shared: Any = None, d_router_w: Any = None, movers: int | None = None, crew: int | None = None,
                 check: bool = False, stream: Any = None) -> BackwardGrads:
        """BackwardGrads (see the module docstring). dy: [T, H] bf16, the gradient of the forward's
        output; routing: the forward's; x_e, a, gate_up: the forward's saved expert rows; w1
        [E/P, 2I, H] and w2 [E/P, H, I] bf16; extra: fp32 [T, H] added to dx before its rounding
        (the shared MLP's dx is added into it: allocated, zeroed, when None; not with `router`,
        whose dx the launch stores in a buffer of its own first); shared: the forward's SharedMLP
        (gate_up required); router: the router's backward (RouterBackward), its d w from this plan's
        combine buffer, which must still hold the forward's expert outputs (and, after a forward
        whose combine left this rank's own rows in place, as MoEForward's does, from router.own_y =
        MoEForward.y_experts through router.own_runs = the combine's own_runs); x: the forward's tokens
        [T, H] bf16, with shared or router. Outputs to write, allocated when None: out (dx), dw1,
        dw2, with `shared` dw1_shared [2 Fs, H] and dw2_shared [H, Fs] (wgrad_dtype), with `router`
        d_router_w [E_pad, H] fp32 (router_w's rows; the result is its first E). Given, they are
        not written after a failed dispatch (allocated, d_router_w comes back NaN then).
        movers / crew as MoEForward's. A rank whose arguments are refused still launches (moving
        nothing, so no peer waits for it) and raises.

        A call that passes every output it writes (MoELayer's does) is checked once per signature
        of its arrays (its memo: kosmos.runtime.call_cache, as MoEForward's)."""
        disp, comb = self.dispatch, self.combine
        refusal = heads = None
        try:
            movers, crew = self._crews(movers, crew)
            key = self._call_key(dy, routing, x_e, a, gate_up, w1, w2, extra, shared, router, x,
                                 out, dw1, dw2, dw1_shared, dw2_shared, d_router_w)
            hit = self._heads_memo.get(key)
            dispatch_args = (dy, routing.start, routing.order, routing.weights) if hit is not None else None
            if hit is None:
                heads, shared_rec, router_rec, k, t, grads, extra, dispatch_args = self._checked_heads(
                    dy, routing, x_e, a, gate_up, w1, w2, extra, shared, router, x, out, dw1, dw2, dw1_shared,
                    dw2_shared, d_router_w, stream)
                # no caller's array in the memo (it would pin them): the router's dx buffer is the launch's
                self._heads_memo.put(key, (heads, shared_rec, router_rec, k, t, extra if router is not None else None))
            else:
                heads, shared_rec, router_rec, k, t, scratch = hit
                extra = scratch if router is not None else extra
                e = self.dispatch.experts
                grads = BackwardGrads(out, dw1, dw2, *((dw1_shared, dw2_shared) if shared is not None else ()),
                                      **({"d_router_w": d_router_w[:e]} if router is not None else {}))
            # the slots are the last call's until this call joins the GPU's order (plan._join)
            disp._join(stream)
            heads = (*heads, self._shared_jobs.put(shared_rec, stream), self._router_jobs.put(router_rec, stream))
            out = grads.dx
        except (TypeError, ValueError) as e:
            refusal = e

        def records():
            ones = self._ones[:t * k].reshape(t, k)  # dY was weighted on its way out: the fold's weights are 1
            return (disp._params(*dispatch_args, k, False, stream, side=self.side_pushes(movers)),
                    comb._params(self._held("d_xe", (disp.capacity_rows, disp.row_bytes // 2), bfloat16), disp,
                                 routing.slot, ones, extra, out, t, stream, scope=1, own_in_place=True))

        self._run(refusal, heads, records, movers, crew, check, stream)
        return grads

    def _call_key(self, dy: Any, routing: Any, x_e: Any, a: Any, gate_up: Any, w1: Any, w2: Any, extra: Any,
                  shared: Any, router: Any, x: Any, *outputs: Any) -> tuple | None:
        """The memo key of a call (kosmos.runtime.call_cache.call_signature of every array it reads or
        writes, and what else its checks read), or None where a call must take the checked path:
        an output it writes left to allocate, no token (the outputs are zeroed), a shared MLP's dx
        summed into a zeroed buffer of its own, the router's pair counts computed per call
        (router.start None under token dropping), or an argument of the wrong kind (the checks say
        what is wrong)."""
        out, dw1, dw2, dw1_s, dw2_s, dwr = outputs
        writes = [out, dw1, dw2] + ([dw1_s, dw2_s] if shared is not None else []) + ([dwr] if router is not None else [])
        if (any(w is None for w in writes) or (shared is not None and router is None and extra is None)
                or len(getattr(dy, "shape", ())) != 2 or dy.shape[0] == 0):  # no token: the outputs are zeroed per call
            return None
        if (not isinstance(routing, DeviceRouting) or shared is not None and not isinstance(shared, SharedMLP)
                or router is not None and (not isinstance(router, RouterBackward)
                                           or router.start is None and routing.kept is not None)):
            return None
        r = routing
        mlp = (shared.w1, shared.w2, shared.h, shared.gate_up) if shared is not None else ()
        rb = ((router.logits, router.router_w, router.status, router.start, router.own_y, router.own_runs)
              if router is not None else ())
        return call_signature(dy, r.experts, r.weights, r.order, r.slot, r.start, r.kept, x_e, a, gate_up, w1, w2,
                              extra, x, *outputs, *mlp, *rb, shared=shared is not None,
                              router=router.cfg if router is not None else None,
                              own_in_place=self.combine.own_rows_in_place)

    def _checked_heads(self, dy: Any, routing: DeviceRouting, x_e: Any, a: Any, gate_up: Any, w1: Any, w2: Any,
                       extra: Any, shared: Any, router: Any, x: Any, out: Any, dw1: Any, dw2: Any, dw1_shared: Any,
                       dw2_shared: Any, d_router_w: Any, stream: Any) -> tuple:
        """(the four grouped GEMMs' kernel arguments, the shared MLP's and the router's job records,
        top_k, T, the BackwardGrads, the fold's fp32 addend or None, the dispatch's dy, start, order
        and weights): the call checked."""
        dy, start, order, weights, k = self.dispatch._checked(dy, routing, True, stream)
        heads, dw1, dw2 = self._gemm_heads(x_e, a, gate_up, w1, w2, dw1, dw2, stream)
        extra, out, t = self.combine.checked_outputs(routing, extra, out, stream)
        if x is not None and shared is None and router is None:
            raise ValueError("x goes with shared or router (their backward reads the forward's tokens)")
        router_rec, extra, d_router_w = self._router_record(dy, routing, router, x, extra, d_router_w, stream)
        shared_rec, extra, d_shared = self._shared_record(dy, shared, x, extra, out, dw1_shared, dw2_shared, stream)
        grads = BackwardGrads(out, dw1, dw2, *(d_shared or (None, None)), d_router_w)
        return heads, shared_rec, router_rec, k, t, grads, extra, (dy, start, order, weights)

    def _null_heads(self, stream: Any) -> tuple:
        return (*super()._null_heads(stream), self._shared_jobs.put(np.zeros((), SHARED_BACKWARD_DTYPE)[()], stream),
                self._router_jobs.put(np.zeros((), ROUTER_BACKWARD_DTYPE)[()], stream))

    def _tokens(self, x: Any, dy: Any, stream: Any) -> Any:
        """x, the forward's tokens (read by the router's and the shared MLP's wgrads), checked: dy's
        [T, H], bf16."""
        x = check_array(x, "x", dtypes=(bfloat16,), device=self.world.device_id, stream=stream)
        if x.shape != dy.shape:
            raise ValueError(f"x must be the forward's {list(dy.shape)} bf16, got {tuple(x.shape)}")
        return x

    def _router_record(self, dy: Any, routing: DeviceRouting, router: RouterBackward | None, x: Any, extra: Any,
                       d_router_w: Any, stream: Any) -> tuple[np.void, Any, Any]:
        """The router's backward record (empty without it, or without tokens), `extra` (the launch's
        buffer for the router's dx) and dWr [E, H] fp32 (None without it; the first E rows of
        d_router_w [E_pad, H], allocated NaN when None); checked."""
        import cupy

        from .. import gemm

        rec = np.zeros((), ROUTER_BACKWARD_DTYPE)
        if router is None:
            return rec[()], extra, None
        if not isinstance(router, RouterBackward):
            raise TypeError(f"router must be a RouterBackward, got {type(router).__name__}")
        if extra is not None:
            raise ValueError("extra goes without router: the launch stores the router's dx there, then adds to it")
        cfg, dev, disp = router.cfg, self.world.device_id, self.dispatch
        t, hid, e = int(dy.shape[0]), int(dy.shape[1]), disp.experts
        if (cfg.experts, cfg.top_k, cfg.hidden) != (e, routing.experts.shape[1], hid):
            raise ValueError(f"router.cfg routes {cfg.experts} experts, top {cfg.top_k}, hidden {cfg.hidden}; this "
                             f"call {e}, top {routing.experts.shape[1]}, hidden {hid}")
        wr = check_array(router.router_w, "router.router_w", dtypes=(bfloat16,), device=dev, stream=stream)
        if wr.ndim != 2 or wr.shape[1] != hid or wr.shape[0] < e or wr.shape[0] % 64:
            raise ValueError(f"router.router_w must be [E_pad, {hid}] bf16, E_pad >= {e} a multiple of 64 (zero rows "
                             f"past E), got {tuple(wr.shape)}")
        status = check_array(router.status, "router.status", dtypes=(np.dtype(np.int64),), device=dev, stream=stream)
        if status.size < 1:
            raise ValueError("router.status must be the forward dispatch's status (int64)")
        e_pad = int(wr.shape[0])
        own_y, own_runs = router.own_y, router.own_runs
        if (own_y is None) != (own_runs is None):
            raise ValueError("router.own_y and router.own_runs go together (a forward that left its own rows in place)")
        if own_y is None and self.combine.own_rows_in_place:
            raise ValueError("the forward's combine left this rank's own rows in place (MoEForward's does): pass "
                             "router.own_y = MoEForward.y_experts and router.own_runs = the combine's own_runs")
        if own_y is not None:
            own_y = check_array(own_y, "router.own_y", dtypes=(bfloat16,), device=dev, stream=stream)
            own_runs = check_array(own_runs, "router.own_runs", dtypes=(np.dtype(np.int32),), device=dev,
                                   stream=stream)
            if (own_y.ndim != 2 or own_y.shape[0] < disp.capacity_rows or own_y.shape[1] != hid
                    or own_runs.shape != (3, disp.e_loc)):
                raise ValueError(f"router.own_y must be [>= {disp.capacity_rows}, {hid}] bf16 and router.own_runs "
                                 f"[3, {disp.e_loc}] int32, got {tuple(own_y.shape)} and {tuple(own_runs.shape)}")
        if d_router_w is None:  # NaN unless the launch's dispatch went through
            d_router_w = cupy.full((e_pad, hid), np.nan, np.float32)
        else:
            d_router_w = check_array(d_router_w, "d_router_w", dtypes=(np.dtype(np.float32),), device=dev,
                                     stream=stream, writable=True)
            if d_router_w.shape != (e_pad, hid):
                raise ValueError(f"d_router_w must be [{e_pad}, {hid}] fp32 (router_w's rows), got "
                                 f"{tuple(d_router_w.shape)}")
        if t == 0:  # no token, no gradient
            d_router_w.fill(0)
            return rec[()], extra, d_router_w[:e]
        logits = check_array(router.logits, "router.logits", dtypes=(np.dtype(np.float32),), device=dev,
                             stream=stream)
        x = self._tokens(x, dy, stream)
        refuse_overlap("d_router_w", d_router_w, dy=dy, x=x, router_w=wr, logits=logits)
        if logits.ndim != 2 or logits.shape[0] != t or logits.shape[1] < e:
            raise ValueError(f"router.logits must be the forward's [{t}, >= {e}] fp32, got {tuple(logits.shape)}")
        start = router.start
        if start is None:  # the routing's own counts are the kept pairs': right only where none was dropped
            start = routing.start if routing.kept is None else pair_starts(routing.experts, e)
        start = check_array(start, "router.start", dtypes=(np.dtype(np.int32),), device=dev, stream=stream)
        if start.shape != (e + 1,):
            raise ValueError(f"router.start must be [{e + 1}] int32, got {tuple(start.shape)}")
        rows = self.combine.max_tokens
        d_logits = self._held("d_logits", (rows, e_pad), bfloat16, t)
        extra = self._held("router_dx", (rows, hid), np.float32, t)  # every element stored by the router's dx job
        tma, tm = gemm.arch_path() == "wgmma", self._tmaps
        rec["grads"] = router_grads_record(
            cfg, logits=logits, chosen=routing.experts, start=start, hidden=hid, comb=self.combine.comb.local,
            slot=routing.slot, dy=dy, status=status, d_logits=d_logits, own_y=own_y, own_runs=own_runs)
        rec["dw"] = gemm.job_record(gemm.gemm_shape("NT", d_logits.shape, x.shape), d_logits, x, d_router_w, tm[8], tma)
        rec["dx"] = gemm.job_record(gemm.gemm_shape("NN", d_logits.shape, wr.shape), d_logits, wr, extra, tm[9], tma)
        return rec[()], extra, d_router_w[:e]

    def _shared_record(self, dy: Any, shared: SharedMLP | None, x: Any, extra: Any, out: Any, dsw1: Any, dsw2: Any,
                       stream: Any) -> tuple[np.void, Any, tuple | None]:
        """The shared MLP's four job records (empty jobs without it, or without tokens), `extra`
        (allocated, zeroed, where the MLP's dx needs it; checked writable and apart from what the
        launch reads and writes, since its dgrad1 adds into it), and (dW1_s, dW2_s) or None (dsw1,
        dsw2, allocated when None); checked."""
        import cupy

        from .. import gemm

        rec = np.zeros((), SHARED_BACKWARD_DTYPE)
        if shared is None:
            return rec[()], extra, None
        if not isinstance(shared, SharedMLP):
            raise TypeError(f"shared must be a SharedMLP, got {type(shared).__name__}")
        dev, wdt = self.world.device_id, self.wgrad_dtype
        t, hid = int(dy.shape[0]), int(dy.shape[1])
        w1 = check_array(shared.w1, "shared.w1", dtypes=(bfloat16,), device=dev, stream=stream)
        w2 = check_array(shared.w2, "shared.w2", dtypes=(bfloat16,), device=dev, stream=stream)
        if w2.ndim != 2 or w2.shape[0] != hid or w1.shape != (2 * w2.shape[1], hid):
            raise ValueError(f"shared.w1 must be [2 Fs, {hid}] and shared.w2 [{hid}, Fs] bf16, got "
                             f"{tuple(w1.shape)} and {tuple(w2.shape)}")
        fs = int(w2.shape[1])
        x = self._tokens(x, dy, stream) if t else x
        grads = []
        for name, g, shape in (("dw1_shared", dsw1, (2 * fs, hid)), ("dw2_shared", dsw2, (hid, fs))):
            grads.append(gemm.output_array(g, shape, wdt, name=name, device=dev, stream=stream, dy=dy, x=x, shared_w1=w1,
                                           shared_w2=w2))  # every element written
        dsw1, dsw2 = grads
        if t == 0:  # zeros: no token, no gradient
            dsw1.view(np.uint16).fill(0)
            dsw2.view(np.uint16).fill(0)
            return rec[()], extra, (dsw1, dsw2)
        h = check_array(shared.h, "shared.h", dtypes=(bfloat16,), device=dev, stream=stream)
        if tuple(h.shape) != (t, fs):
            raise ValueError(f"shared.h must be the forward's [{t}, {fs}] bf16, got {tuple(h.shape)}")
        s_a = gemm.gemm_shape("NN", dy.shape, w2.shape, "swiglu_backward")       # d_pre_s [T, 2 Fs]
        d_pre = self._held("d_pre_s", (self.combine.max_tokens, s_a.out_shape[1]), bfloat16, t)
        gate_up = gemm.gate_up_array(shared.gate_up, s_a, dev, stream, a=dy, b=w2, output=d_pre)
        if extra is None:
            extra = cupy.zeros((t, hid), np.float32)
        else:
            extra = check_array(extra, "extra", device=dev, stream=stream, writable=True)
            refuse_overlap("extra", extra, dy=dy, x=x, shared_w1=w1, shared_w2=w2, shared_h=h, gate_up=gate_up,
                           dx=out)
        tma, tm = gemm.arch_path() == "wgmma", self._tmaps
        jobs = (("dgrad2", s_a, dy, w2, d_pre, gate_up),
                ("wgrad2", gemm.gemm_shape("NT", dy.shape, h.shape), dy, h, dsw2, None),
                ("dgrad1", gemm.gemm_shape("NN", d_pre.shape, w1.shape, "accumulate"), d_pre, w1, extra, None),
                ("wgrad1", gemm.gemm_shape("NT", d_pre.shape, x.shape), d_pre, x, dsw1, None))
        for i, (name, shape, a, b, o, gu) in enumerate(jobs):
            rec[name] = gemm.job_record(shape, a, b, o, tm[4 + i], tma, gu)
        return rec[()], extra, (dsw1, dsw2)

    def _gemm_heads(self, x_e: Any, a: Any, gate_up: Any, w1: Any, w2: Any, dw1: Any, dw2: Any,
                    stream: Any) -> tuple:
        """(the four GEMMs' kernel arguments (maps, problem, epilogue), dW1, dW2), checked."""
        from .. import gemm, grouped

        disp, dev = self.dispatch, self.world.device_id
        cap, hid, g = disp.capacity_rows, disp.row_bytes // 2, disp.e_loc
        d_ye = disp.arena.local.view(bfloat16).reshape(cap, hid)
        arrays = {}
        for name, v in (("x_e", x_e), ("a", a), ("gate_up", gate_up), ("w1", w1), ("w2", w2)):
            arrays[name] = check_array(v, name, dtypes=(bfloat16,), device=dev, stream=stream)
        x_e, a, gate_up, w1, w2 = (arrays[n] for n in ("x_e", "a", "gate_up", "w1", "w2"))
        if x_e.shape != (cap, hid):
            raise ValueError(f"x_e must be the forward's expert rows [{cap}, {hid}] bf16, got {tuple(x_e.shape)}")
        if w2.ndim != 3 or a.shape != (cap, w2.shape[-1]):
            raise ValueError(f"a must be the forward's [{cap}, I] bf16 with w2 [{g}, {hid}, I]; got a {tuple(a.shape)}, "
                             f"w2 {tuple(w2.shape)}")
        s_a = grouped.grouped_shape("NN", d_ye.shape, w2.shape, g, "swiglu_backward")     # d_pre [cap, 2I]
        d_pre = self._held("d_pre", s_a.out_shape, bfloat16)
        gate_up = gemm.gate_up_array(gate_up, s_a, dev, stream, a=d_ye, b=w2, output=d_pre)
        s_b = grouped.grouped_shape("NT", d_ye.shape, a.shape, g)                          # dW2 [E/P, H, I]
        s_c = grouped.grouped_shape("NN", d_pre.shape, w1.shape, g)                        # dX_e [cap, H]
        s_d = grouped.grouped_shape("NT", d_pre.shape, x_e.shape, g)                       # dW1 [E/P, 2I, H]
        if s_c.out_shape != (cap, hid):
            raise ValueError(f"w1 must be [{g}, {d_pre.shape[1]}, {hid}] bf16, got {tuple(w1.shape)}")
        d_xe = self._held("d_xe", (cap, hid), bfloat16)
        dw2 = gemm.output_array(dw2, s_b.out_shape, self.wgrad_dtype, name="dw2", device=dev, stream=stream, a=d_ye, b=a)
        dw1 = gemm.output_array(dw1, s_d.out_shape, self.wgrad_dtype, name="dw1", device=dev, stream=stream, a=d_pre, b=x_e)
        tma = gemm.arch_path() == "wgmma"
        t = self._tmaps
        heads = (*grouped.kernel_head(s_a, d_ye, w2, d_pre, t[0], 256, tma, gate_up),
                 *grouped.kernel_head(s_b, d_ye, a, dw2, t[1], 256, tma),
                 *grouped.kernel_head(s_c, d_pre, w1, d_xe, t[2], 256, tma),
                 *grouped.kernel_head(s_d, d_pre, x_e, dw1, t[3], 256, tma))
        return heads, dw1, dw2
