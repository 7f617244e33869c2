"""MoEBackward: the local experts' part of the MoE backward in one launch, dY dispatch to dX fold.

MoELayer's path "fused" backward runs it (bitwise the device path's separate launches:
tests/gpu/test_moe_backward_fused.py, tests/gpu/test_moe_layer.py; at world 1 on the H200 it is
0.85-1.13x the device path's speed: notes/moe.md, session 13).

    bwd = MoEBackward(dispatch, combine, wgrad_dtype=np.float32)   # the layer's backward dispatch plan
    dx, dw1, dw2 = bwd(dy, routing, x_e, a, gate_up, w1, w2, extra=None)

One persistent kernel (hipsrc/kosmos/moe/backward.h), on the forward's routing and saved tensors
(x_e: the forward's dispatch arena rows [capacity, H]; a = silu(gate) * up [capacity, I]; gate_up
[capacity, 2I]; the arena rows of this dispatch line up with them: same routing, same counts):
the builders' idle warps push each pair's dY row, times its routing weight, to its expert's owner
beside one builder call over four GEMMs: dgrad2 with the SwiGLU backward in its epilogue
(d_pre = [dg, du], dA never stored) as the rows land, wgrad2 (dW2 = dY_e^T a_e), dgrad1 (dX_e = d_pre
W1, each tile once dgrad2 has finished its tile row) and wgrad1 (dW1 = d_pre^T x_e, each expert once
dgrad2 has finished all its rows); a crew pushes each dX row home as soon as its dgrad1 tile row
is done, the builders join it; every rank then sums each token's k rows in fp32 with `extra` (the
router's and shared experts' dx, fp32 [T, H]) and rounds once. Returns dx [T, H] bf16 and dW1
[E/P, 2I, H], dW2 [E/P, H, I] in wgrad_dtype (float32 or bfloat16).

After a dispatch that moved nothing (a routing past capacity, or a refused rank) dx is NaN and the
weight gradients are not written: check `dispatch.check_status()` (or pass check=True).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..arrays import check_array
from ..dtypes import bfloat16, float32
from ..runtime.streams import uses_stream
from .combine import MoECombine
from .dispatch import MoEDispatch
from .forward import ExpertsLaunch
from .route import DeviceRouting


class MoEBackward(ExpertsLaunch):
    crew_per_16 = 1  # a sixteenth of the grid combines (ExpertsLaunch.crew_per_16)

    def __init__(self, dispatch: MoEDispatch, combine: MoECombine, wgrad_dtype: Any = float32):
        wdt = np.dtype(wgrad_dtype)
        if wdt not in (np.dtype(float32), np.dtype(bfloat16)):
            raise TypeError(f"wgrad_dtype must be float32 or bfloat16, got {wdt}")
        from .. import gemm

        super().__init__(dispatch, combine, "kosmos_moe_backward_" + ("f32" if wdt == np.dtype(float32) else "bf16"), 4)
        self.wgrad_dtype = wdt
        self.epilogues = (gemm.SWIGLU_EPI_DTYPE, gemm.EPI_DTYPE, gemm.EPI_DTYPE, gemm.EPI_DTYPE)
        self._d_pre = self._d_xe = None   # [capacity, 2I], [capacity, H] bf16: dgrad2's and dgrad1's outputs
        self._tmaps: tuple[dict, ...] = ({}, {}, {}, {})

    @uses_stream
    def __call__(self, dy: Any, routing: DeviceRouting, x_e: Any, a: Any, gate_up: Any, w1: Any, w2: Any, *,
                 extra: Any = None, out: Any = None, dw1: Any = None, dw2: Any = None, movers: int | None = None,
                 crew: int | None = None, check: bool = False, stream: Any = None) -> tuple[Any, Any, Any]:
        """(dx, dW1, dW2); see the module docstring. dy: [T, H] bf16, the gradient of the forward's
        output; routing: the forward's; x_e, a, gate_up: the forward's saved expert rows; w1 [E/P,
        2I, H] and w2 [E/P, H, I] bf16; extra: fp32 [T, H] added to dx before its rounding; out,
        dw1, dw2: outputs to write (allocated when None). movers / crew as MoEForward's. A rank whose
        arguments are refused still launches (moving nothing, so no peer waits for it) and raises."""
        disp, comb = self.dispatch, self.combine
        refusal = heads = None
        try:
            dy, start, order, weights, k = disp._checked(dy, routing, True, stream)
            movers, crew = self._crews(movers, crew)
            heads, dw1, dw2 = self._gemm_heads(x_e, a, gate_up, w1, w2, dw1, dw2, stream)
            extra, out, t = comb.checked_outputs(routing, extra, out, stream)
        except (TypeError, ValueError) as e:
            refusal = e

        def records():
            import cupy

            ones = cupy.ones(routing.weights.shape, np.float32)  # dY was weighted on its way out
            return (disp._params(dy, start, order, weights, k, False, stream, side=self.side_pushes(movers)),
                    comb._params(self._d_xe, disp, routing.slot, ones, extra, out, t, stream, scope=1))

        self._run(refusal, heads, records, movers, crew, check, stream)
        return out, dw1, dw2

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
