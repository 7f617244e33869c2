"""MoEBackward: the local experts' part of the MoE backward in one launch, dY dispatch to dX fold.

MoELayer's path "fused" backward runs it (bitwise the device path's separate launches:
tests/gpu/test_moe_backward_fused.py, tests/gpu/test_moe_layer.py; at world 1 on the H200 it is
0.85-1.13x the device path's speed: notes/moe.md, session 13).

    bwd = MoEBackward(dispatch, combine, wgrad_dtype=np.float32)   # the layer's backward dispatch plan
    dx, dw1, dw2, _, _ = bwd(dy, routing, x_e, a, gate_up, w1, w2, extra=None)
    dx, dw1, dw2, dsw1, dsw2 = bwd(..., extra=extra, shared=SharedMLP(sw1, sw2, h_s, gate_up_s), x=x)

One persistent kernel (hipsrc/kosmos/moe/backward.h), on the forward's routing and saved tensors
(x_e: the forward's dispatch arena rows [capacity, H]; a = silu(gate) * up [capacity, I]; gate_up
[capacity, 2I]; the arena rows of this dispatch line up with them: same routing, same counts):
the builders' idle warps push each pair's dY row, times its routing weight, to its expert's owner
beside one builder call over four GEMMs: dgrad2 with the SwiGLU backward in its epilogue
(d_pre = [dg, du], dA never stored) as the rows land, wgrad2 (dW2 = dY_e^T a_e), dgrad1 (dX_e = d_pre
W1, each tile once dgrad2 has finished its tile row) and wgrad1 (dW1 = d_pre^T x_e, each expert once
dgrad2 has finished all its rows); a crew pushes each dX row home as soon as its dgrad1 tile row
is done, the builders join it; every rank then sums each token's k rows in fp32 with `extra` (the
router's dx, fp32 [T, H]) and rounds once. With `shared` (the forward's SharedMLP: its h and gate_up
now read) the shared experts' MLP's backward runs as four more jobs of the same builder call
(hipsrc/kosmos/moe/backward.h: its dgrad2 with the SwiGLU backward and its wgrad2 first, while dY
lands; its dgrad1, added into `extra` by the TMA unit, and its wgrad1 last; the fold waits for the
dgrad1). Their records live in device memory (kosmos/runtime/records.py: the kernel's parameters
would pass HIP's 4 KB). Returns dx [T, H] bf16, dW1 [E/P, 2I, H], dW2 [E/P, H, I] and the shared
MLP's dW1_s [2 Fs, H], dW2_s [H, Fs] (None without it) in wgrad_dtype (float32 or bfloat16).

After a dispatch that moved nothing (a routing past capacity, or a refused rank) dx is NaN and no
weight gradient is written, the shared MLP's included (MoELayer fills them with NaN); after a wait
that gave up mid-call `extra` may hold part of the shared MLP's dx: check `dispatch.check_status()`
(or pass check=True).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..arrays import check_array, refuse_overlap
from ..dtypes import bfloat16, float32
from ..runtime.streams import uses_stream
from .combine import MoECombine
from .dispatch import MoEDispatch
from ..runtime.mirror import StructMirror
from ..runtime.records import DeviceRecord
from .forward import ExpertsLaunch, SharedMLP
from .route import DeviceRouting


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


SHARED_BACKWARD_DTYPE = _shared_backward_dtype()
MIRRORS = [StructMirror(f"kosmos::moe::SharedBackward<kosmos::gemm::{w}>", SHARED_BACKWARD_DTYPE, alignment=64)
           for w in ("EpiStoreF32", "EpiStoreBf16")]


class MoEBackward(ExpertsLaunch):
    crew_per_16 = 1  # a sixteenth of the grid combines (ExpertsLaunch.crew_per_16)

    def __init__(self, dispatch: MoEDispatch, combine: MoECombine, wgrad_dtype: Any = float32):
        wdt = np.dtype(wgrad_dtype)
        if wdt not in (np.dtype(float32), np.dtype(bfloat16)):
            raise TypeError(f"wgrad_dtype must be float32 or bfloat16, got {wdt}")
        from .. import gemm

        super().__init__(dispatch, combine, "kosmos_moe_backward_" + ("f32" if wdt == np.dtype(float32) else "bf16"), 8)
        self.wgrad_dtype = wdt
        self.epilogues = (gemm.SWIGLU_EPI_DTYPE, gemm.EPI_DTYPE, gemm.EPI_DTYPE, gemm.EPI_DTYPE)
        self._d_pre = self._d_xe = None   # [capacity, 2I], [capacity, H] bf16: dgrad2's and dgrad1's outputs
        self._d_pre_s = None              # [T, 2 Fs] bf16: the shared MLP's d[gate, up]
        self._tmaps: tuple[dict, ...] = tuple({} for _ in range(8))
        self._shared_jobs = DeviceRecord(SHARED_BACKWARD_DTYPE)

    @uses_stream
    def __call__(self, dy: Any, routing: DeviceRouting, x_e: Any, a: Any, gate_up: Any, w1: Any, w2: Any, *,
                 extra: Any = None, shared: SharedMLP | None = None, x: Any = None, out: Any = None,
                 dw1: Any = None, dw2: Any = None, movers: int | None = None, crew: int | None = None,
                 check: bool = False, stream: Any = None) -> tuple[Any, Any, Any, Any, Any]:
        """(dx, dW1, dW2, dW1_s, dW2_s); see the module docstring. dy: [T, H] bf16, the gradient of
        the forward's output; routing: the forward's; x_e, a, gate_up: the forward's saved expert
        rows; w1 [E/P, 2I, H] and w2 [E/P, H, I] bf16; extra: fp32 [T, H] added to dx before its
        rounding (the shared MLP's dx is added into it: allocated, zeroed, when None); shared: the
        forward's SharedMLP (gate_up required), with x: the forward's tokens [T, H] bf16; out, dw1,
        dw2: outputs to write (allocated when None). movers / crew as MoEForward's. A rank whose
        arguments are refused still launches (moving nothing, so no peer waits for it) and raises."""
        disp, comb = self.dispatch, self.combine
        refusal = heads = d_shared = None
        try:
            dy, start, order, weights, k = disp._checked(dy, routing, True, stream)
            movers, crew = self._crews(movers, crew)
            heads, dw1, dw2 = self._gemm_heads(x_e, a, gate_up, w1, w2, dw1, dw2, stream)
            extra, out, t = comb.checked_outputs(routing, extra, out, stream)
            shared_rec, extra, d_shared = self._shared_record(dy, shared, x, extra, out, stream)
            # the slot is the last call's until this call joins the GPU's order (plan._join)
            disp._join(stream)
            heads = (*heads, self._shared_jobs.put(shared_rec, stream))
        except (TypeError, ValueError) as e:
            refusal = e

        def records():
            import cupy

            ones = cupy.ones(routing.weights.shape, np.float32)  # dY was weighted on its way out
            return (disp._params(dy, start, order, weights, k, False, stream, side=self.side_pushes(movers)),
                    comb._params(self._d_xe, disp, routing.slot, ones, extra, out, t, stream, scope=1))

        self._run(refusal, heads, records, movers, crew, check, stream)
        return (out, dw1, dw2, *(d_shared or (None, None)))

    def _null_heads(self, stream: Any) -> tuple:
        return (*super()._null_heads(stream), self._shared_jobs.put(np.zeros((), SHARED_BACKWARD_DTYPE)[()], stream))

    def _shared_record(self, dy: Any, shared: SharedMLP | None, x: Any, extra: Any, out: Any,
                       stream: Any) -> tuple[np.void, Any, tuple | None]:
        """The shared MLP's four job records (empty jobs without it, or without tokens), `extra`
        (allocated, zeroed, where the MLP's dx needs it; checked writable and apart from what the
        launch reads and writes, since its dgrad1 adds into it), and (dW1_s, dW2_s) or None; checked."""
        import cupy

        from .. import gemm

        rec = np.zeros((), SHARED_BACKWARD_DTYPE)
        if shared is None:
            if x is not None:
                raise ValueError("x goes with shared (the shared MLP's backward reads the forward's tokens)")
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
        if t == 0:  # zeros: no token, no gradient
            return rec[()], extra, (cupy.zeros((2 * fs, hid), wdt), cupy.zeros((hid, fs), wdt))
        dsw1, dsw2 = cupy.empty((2 * fs, hid), wdt), cupy.empty((hid, fs), wdt)  # every element written
        x = check_array(x, "x", dtypes=(bfloat16,), device=dev, stream=stream)
        h = check_array(shared.h, "shared.h", dtypes=(bfloat16,), device=dev, stream=stream)
        for name, v, shape in (("x", x, (t, hid)), ("shared.h", h, (t, fs))):
            if tuple(v.shape) != shape:
                raise ValueError(f"{name} must be the forward's {list(shape)} bf16, got {tuple(v.shape)}")
        s_a = gemm.gemm_shape("NN", dy.shape, w2.shape, "swiglu_backward")       # d_pre_s [T, 2 Fs]
        if self._d_pre_s is None or self._d_pre_s.shape != s_a.out_shape:
            self._d_pre_s = cupy.empty(s_a.out_shape, bfloat16)
        gate_up = gemm.gate_up_array(shared.gate_up, s_a, dev, stream, a=dy, b=w2, output=self._d_pre_s)
        if extra is None:
            extra = cupy.zeros((t, hid), np.float32)
        else:
            extra = check_array(extra, "extra", device=dev, stream=stream, writable=True)
            refuse_overlap("extra", extra, dy=dy, x=x, shared_w1=w1, shared_w2=w2, shared_h=h, gate_up=gate_up,
                           dx=out)
        d_pre = self._d_pre_s
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
        import cupy

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
        if self._d_pre is None or self._d_pre.shape != s_a.out_shape:
            self._d_pre = cupy.empty(s_a.out_shape, bfloat16)
        gate_up = gemm.gate_up_array(gate_up, s_a, dev, stream, a=d_ye, b=w2, output=self._d_pre)
        s_b = grouped.grouped_shape("NT", d_ye.shape, a.shape, g)                          # dW2 [E/P, H, I]
        s_c = grouped.grouped_shape("NN", self._d_pre.shape, w1.shape, g)                  # dX_e [cap, H]
        s_d = grouped.grouped_shape("NT", self._d_pre.shape, x_e.shape, g)                 # dW1 [E/P, 2I, H]
        if s_c.out_shape != (cap, hid):
            raise ValueError(f"w1 must be [{g}, {self._d_pre.shape[1]}, {hid}] bf16, got {tuple(w1.shape)}")
        if self._d_xe is None:
            self._d_xe = cupy.empty((cap, hid), bfloat16)
        dw2 = gemm.output_array(dw2, s_b.out_shape, self.wgrad_dtype, a=d_ye, b=a)
        dw1 = gemm.output_array(dw1, s_d.out_shape, self.wgrad_dtype, a=self._d_pre, b=x_e)
        tma = gemm.arch_path() == "wgmma"
        t = self._tmaps
        heads = (*grouped.kernel_head(s_a, d_ye, w2, self._d_pre, t[0], 256, tma, gate_up),
                 *grouped.kernel_head(s_b, d_ye, a, dw2, t[1], 256, tma),
                 *grouped.kernel_head(s_c, self._d_pre, w1, self._d_xe, t[2], 256, tma),
                 *grouped.kernel_head(s_d, self._d_pre, x_e, dw1, t[3], 256, tma))
        return heads, dw1, dw2
