"""MoEForward: the MoE forward in one launch, router (or dispatch, given a routing) to fold.

MoELayer(path="fused") runs it. On the H200 it passes its tests at 1, 2 and 4 ranks, bitwise the
separate launches; at world 1 it runs at 1.01-1.13x their speed (notes/moe.md, session 15: the
dispatch, an HBM copy there, is pushed by the warps the builders leave idle, beside GEMM1, which is
compute-bound). Its two GEMMs run in one builder call. (Builder calls
that trade registers back to back hung, one call in 50-800, until the ring-position mend of
session 11: 3,000 calls clean since.)

    fwd = MoEForward(dispatch, combine)     # a MoEDispatch and a MoECombine of the same world and experts
    y, h = fwd(x, routing, w1, w2, gate_up=None)         # routing: kosmos.moe.route's
    lr = LaunchRouting(cfg, max_tokens)     # or the routing inside the launch:
    y, h = fwd(x, lr, w1, w2, router_w=wr, bias=None)    # lr.routing(T): its plan, lr.logits[:T]
    y, h = fwd(..., shared=SharedMLP(sw1, sw2, h_s, gate_up_s))   # with the shared experts' MLP

One persistent kernel (hipsrc/kosmos/moe/forward.h). Given a LaunchRouting, every CTA first builds
router GEMM tiles (fp32 logits), then the CTAs route their chunks of tokens and lay out the
dispatch plan between grid barriers (hipsrc/kosmos/moe/router.h: kosmos.moe.route's steps, the
same bits). Then the producer warpgroup's idle warps of every
builder CTA push the token rows into their experts' owners' arenas beside the GEMMs (and `movers`
CTAs, none by default, push before they build); GEMM1 tiles (h = silu(gate) * up of the arena rows times w1
[E/P, 2F, H], the pre-activations optionally kept in gate_up [capacity, 2F]) wait only for the
(expert, source) runs they read; GEMM2 tiles (y_e = h w2^T, w2 [E/P, H, F]) wait for GEMM1's tile
row; a crew (none by default) pushes each expert output row home as soon as its GEMM2 tile row is
done, the builders join it when GEMM2's queue is dry; every rank then folds its tokens' k rows
with their router weights in fp32, plus the shared experts' MLP's output, rounded once. That MLP
(SharedMLP: h_s = silu(x g^T) * (x u^T), then h_s w2^T in fp32) runs as jobs of the same builder
call: its first GEMM before GEMM1 (it needs no routed row: the CTAs build it while the dispatch
lands), its second after GEMM2; the fold waits for it. Returns y [T, H] bf16 and h [capacity, F]
bf16 (the arena's order, for the backward). The counts never leave the GPU, nothing is zeroed by a separate launch:
a call can be captured in a CUDA graph.

The dispatch plan's arena, group_rows and status, and the combine plan's buffer, are this call's
(as after the separate launches: `dispatch.check_status()` raises on an overflow). The combine plan
may still be called alone (the MoE backward does); the dispatch plan should not be shared with
another forward. A routing past the capacity moves nothing on every rank and y is NaN.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrays import check_array, refuse_overlap
from ..dtypes import bfloat16
from ..runtime.call_cache import CallCache, call_signature
from ..runtime.streams import uses_stream
from .combine import MoECombine, combine_smem_bytes
from .dispatch import MoEDispatch, dispatch_smem_bytes, fused_launch
from .route import DeviceRouting, LaunchRouting, no_route


def null_heads(*epilogues: np.dtype) -> tuple:
    """The GEMMs' arguments of a refused call, one head per epilogue record dtype (never read: no
    CTA builds)."""
    from .. import gemm

    zero = lambda dt: np.zeros((), dt)[()]  # noqa: E731
    t = gemm.ZERO_TMAP
    return tuple(v for dt in epilogues for v in (t, t, t, zero(gemm.PROBLEM_DTYPE), zero(dt)))


@dataclass
class SharedMLP:
    """The shared experts' MLP for MoEForward (MoEConfig.shared_width Fs): weights w1 [2 Fs, H] (gate
    rows, then up rows) and w2 [H, Fs], bf16; the launch writes h [T, Fs] bf16 (silu(gate) * up)
    and, when given, gate_up [T, 2 Fs] bf16 (the pre-activations, for the backward)."""
    w1: Any
    w2: Any
    h: Any
    gate_up: Any = None


class ExpertsLaunch:
    """What the MoE megakernels (MoEForward, moe/backward.py's MoEBackward) share: a dispatch and a
    combine plan of one world and experts, one fused launch (`kernel`, in the hipsrc/moe_fused_*.hip file
    dispatch.fused_kernel_file names) with `queues` GEMM
    queues (head and CTAs out each, then the CTAs out of the counters' reset), and the finished
    tiles per tile row of the two GEMMs the combine and a later GEMM wait for (then four counters:
    the forward's shared MLP GEMMs' finished tiles; the backward's shared dgrad2's and dgrad1's,
    the router dx's, and the CTAs through its router phase)."""

    def __init__(self, dispatch: MoEDispatch, combine: MoECombine, kernel: str, queues: int):
        import cupy

        from .. import gemm

        if dispatch.world is not combine.world or dispatch.experts != combine.experts:
            raise ValueError("the dispatch and combine plans are for other worlds or other experts")
        if dispatch.row_bytes != combine.row_bytes:
            raise ValueError(f"the dispatch moves rows of {dispatch.row_bytes} B, the combine of {combine.row_bytes} B")
        self.dispatch, self.combine, self.world, self.kernel = dispatch, combine, dispatch.world, kernel
        P, E = self.world.size, dispatch.experts
        tables = max(dispatch_smem_bytes(P, E), combine_smem_bytes(P, E, dispatch.e_loc))
        self.launch = fused_launch(self.world, kernel, tables, "path='device'")
        self._words = cupy.zeros(2 * queues + 1, np.uint64)
        # finished tiles per tile row of two GEMMs (the kernel's last CTA zeroes them)
        self._rows_cap = dispatch.capacity_rows // gemm.tile_shape()[0] + dispatch.e_loc + 1
        self._rows_done = cupy.zeros(2 * self._rows_cap + 4, np.uint64)
        cupy.cuda.runtime.deviceSynchronize()  # the zeroed counters, before a first call on any stream

    @property
    def grid(self) -> int:
        return self.launch.grid

    # The combine crew's default at world > 1, in CTAs per 16 of the grid (chosen at world 1,
    # session 12, notes/moe.md: a crew only idles in the forward -- 0 was 0-11 % faster -- and in
    # the backward a sixteenth was within 3 % of the best crew then; session 23 measured crew 0
    # 7 % faster than 8 at DeepSeek-V3 2,048 once the shared MLP and the router joined the launch,
    # so world 1 takes none). Unmeasured at world > 1.
    crew_per_16 = 0

    def _crews(self, movers: Any, crew: Any) -> tuple[int, int]:
        """(movers, crew) checked, defaults: on Hopper no CTA pushes first (movers 0: the warps each
        builder leaves idle push beside it, as they do anyway); elsewhere a quarter of the grid
        (side work runs before a CTA's jobs there: with movers 0 every CTA pushes, then builds);
        crew_per_16 of the grid where rows cross to other ranks (world > 1), none at world 1: there
        the crew only copies rows in HBM, which the builders do after their jobs for less than the
        crew's share of the SMs costs (session 23's backward trace, notes/moe.md)."""
        def size(n: Any, name: str, default: int, lo: int, hi: int) -> int:
            n = default if n is None else n
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not lo <= n <= hi:
                raise ValueError(f"{name} = {n!r} must be an integer in [{lo}, {hi}] (CTAs of the {self.grid}-CTA "
                                 f"grid)")
            return int(n)

        g = self.grid
        default = 0 if self._beside else max(1, g // 4)
        crew_default = g * self.crew_per_16 // 16 if self.world.size > 1 else 0
        return size(movers, "movers", default, 0, g), size(crew, "crew", crew_default, 0, g - 1)

    @property
    def _beside(self) -> bool:
        """Whether the builders' idle warps push beside them (hipsrc/kosmos/moe/experts.h side_pushes:
        the Hopper builder)."""
        from .. import gemm

        return gemm.arch_path() == "wgmma"

    def side_pushes(self, movers: int) -> bool:
        """Whether warps push dispatch items (then items are a warp's grain): experts.h side_pushes."""
        return self._beside or movers == 0

    def _null_heads(self, stream: Any) -> tuple:
        """The GEMMs' arguments of a refused call (kernel argument order), on `stream` once this call
        joined the GPU's order."""
        return null_heads(*self.epilogues)

    def _run(self, refusal: Exception | None, heads: Any, records: Any, movers: Any, crew: Any, check: bool,
             stream: Any) -> None:
        """Launch this call: heads (the GEMMs' arguments) and records() -> (DispatchParams,
        CombineParams). A rank that refused its arguments launches anyway, moving nothing (its
        peers see counts of -1 and wait for nobody), then raises the refusal. check: a host sync,
        raising on an overflow or a failed wait."""
        disp, comb = self.dispatch, self.combine
        if refusal is None:
            drec, crec = records()
        else:
            self.dispatch._join(stream)
            heads = self._null_heads(stream)
            drec = disp._params(None, None, None, None, 1, True, stream)
            crec = comb._params(None, disp, None, None, None, None, 0, stream, scope=1)
            movers, crew = 1, 0
        self.launch([*heads, drec, crec, np.int32(movers), np.int32(crew), np.int32(self._rows_cap), self._words,
                     self._rows_done], stream=stream)
        if refusal is not None:
            raise refusal
        if check:
            disp.check_status()


class MoEForward(ExpertsLaunch):
    def __init__(self, dispatch: MoEDispatch, combine: MoECombine):
        from .. import gemm

        super().__init__(dispatch, combine, "kosmos_moe_forward", 5)
        # the kernel's epilogue records, in order: the router GEMM's, GEMM1's, GEMM2's, the shared
        # MLP's two
        self.epilogues = (gemm.EPI_DTYPE, gemm.SWIGLU_EPI_DTYPE, gemm.EPI_DTYPE, gemm.SWIGLU_EPI_DTYPE, gemm.EPI_DTYPE)
        self._h = self._y_e = None
        self._tmaps: tuple[dict, ...] = ({}, {}, {}, {})
        # the GEMMs' arguments of checked calls (_heads), with the shared MLP's fp32 output each built
        self._heads_memo = CallCache(size=8)

    def _no_router(self) -> tuple:
        """The router's arguments of a call whose routing came with it (or was refused)."""
        return (*null_heads(self.epilogues[0]), no_route())

    def _null_heads(self, stream: Any) -> tuple:
        return (*self._no_router(), *null_heads(*self.epilogues[1:]))

    @uses_stream
    def __call__(self, x: Any, routing: DeviceRouting | LaunchRouting, w1: Any, w2: Any, *, router_w: Any = None,
                 bias: Any = None, gate_up: Any = None, shared: SharedMLP | None = None, out: Any = None,
                 movers: int | None = None, crew: int | None = None, check: bool = False,
                 stream: Any = None) -> tuple[Any, Any]:
        """y [T, H] bf16 and h [capacity_rows, F] bf16 (see the module docstring). x: this rank's
        tokens [T, H] bf16; routing: kosmos.moe.route's plan for them, or a LaunchRouting: then the
        launch routes x itself first (router_w [E, H] bf16, bias as the config says) and
        routing.routing(T) holds the plan afterwards. shared: the shared experts' MLP, run in the
        launch and added in the fold. movers: CTAs that push rows before they build
        (default 0: only the warps beside the builders push); crew: CTAs that start the combine when
        GEMM1's tiles are all taken instead of building GEMM2 (default: an eighth). check: a host
        sync, raising on an overflow or a failed wait. A rank whose arguments are refused still
        launches (moving nothing, so no peer waits for it) and raises."""
        disp, comb = self.dispatch, self.combine
        refusal = heads = None
        try:
            here = isinstance(routing, LaunchRouting)
            if here:
                x = check_array(x, "x", dtypes=(bfloat16,), device=self.world.device_id, stream=stream)
                if x.ndim != 2:
                    raise ValueError(f"x must be [T, H], got {tuple(x.shape)}")
                launch_routing, routing = routing, routing.routing(int(x.shape[0]))
            elif router_w is not None or bias is not None:
                raise ValueError("router_w and bias go with a LaunchRouting (the routing inside the launch)")
            x, start, order, _, k = disp._checked(x, routing, False, stream)
            if x.dtype != bfloat16:
                raise TypeError(f"the experts' GEMMs take bf16 tokens, got {x.dtype}")
            movers, crew = self._crews(movers, crew)
            _, out, t = comb.checked_outputs(routing, None, out, stream)
            heads, shared_out = self._heads(x, launch_routing if here else None, router_w, bias, w1, w2, gate_up,
                                            shared, stream)
        except (TypeError, ValueError) as e:
            refusal = e
        self._run(refusal, heads, lambda: (
            disp._params(x, start, order, None, k, False, stream, side=self.side_pushes(movers)),
            comb._params(self._y_e, disp, routing.slot, routing.weights, shared_out, out, t, stream, scope=1,
                         own_in_place=True)),
            movers, crew, check, stream)
        return out, self._h

    @property
    def y_experts(self) -> Any:
        """The last call's expert outputs [capacity, H] bf16 (the arena's order), where its combine
        left the rows this rank's own experts sent it (the router's backward reads them there:
        RouterBackward.own_y, with the combine's own_runs); None before the first call."""
        return self._y_e

    def _heads(self, x: Any, launch_routing: LaunchRouting | None, router_w: Any, bias: Any, w1: Any, w2: Any,
               gate_up: Any, shared: Any, stream: Any) -> tuple[tuple, Any]:
        """The GEMMs' kernel arguments (the router's, GEMM1's and GEMM2's, the shared MLP's), checked,
        and the shared MLP's fp32 output (or None). A pure function of the arrays' signatures, the
        routing's buffers and this plan's (allocated once; _gemm_heads starts the memo over when it
        reallocates them), so a call whose signature was seen before skips the checks and the
        records (kosmos.runtime.call_cache): ~200 us of host time a call at Qwen3-30B (session 32's
        profile). Each memo entry keeps its own fp32 output."""
        from .. import gemm

        mlp = (shared.w1, shared.w2, shared.h, shared.gate_up) if isinstance(shared, SharedMLP) else ()
        key = (call_signature(x, router_w, bias, w1, w2, gate_up, *mlp, routing=launch_routing,
                              shared=shared is not None) if shared is None or mlp else None)
        hit = self._heads_memo.get(key)
        if hit is not None:
            return hit
        route_head = (launch_routing.head(x, router_w, bias, gemm.arch_path() == "wgmma", stream)
                      if launch_routing is not None else self._no_router())
        shared_heads, shared_out = self._shared_heads(x, shared, stream)
        made = (*route_head, *self._gemm_heads(w1, w2, gate_up, stream), *shared_heads), shared_out
        self._heads_memo.put(key, made)
        return made

    def _shared_heads(self, x: Any, shared: SharedMLP | None, stream: Any) -> tuple[tuple, Any]:
        """The shared MLP's kernel arguments (both GEMMs' maps, problems and epilogues), checked,
        and its fp32 output [T, H] (the fold's addend); empty jobs and None without it (or tokens)."""
        import cupy

        from .. import gemm

        if shared is not None and not isinstance(shared, SharedMLP):
            raise TypeError(f"shared must be a SharedMLP, got {type(shared).__name__}")
        t, hid = int(x.shape[0]), int(x.shape[1])
        if shared is None or t == 0:
            return null_heads(*self.epilogues[3:]), None
        dev = self.world.device_id
        w1 = check_array(shared.w1, "shared.w1", dtypes=(bfloat16,), device=dev, stream=stream)
        w2 = check_array(shared.w2, "shared.w2", dtypes=(bfloat16,), device=dev, stream=stream)
        s1 = gemm.gemm_shape("TN", x.shape, w1.shape, "swiglu")
        h = check_array(shared.h, "shared.h", dtypes=(bfloat16,), device=dev, stream=stream, writable=True)
        if tuple(h.shape) != s1.out_shape:
            raise ValueError(f"shared.h must be {list(s1.out_shape)} bf16, got {tuple(h.shape)}")
        refuse_overlap("shared.h", h, x=x, w1=w1)
        if tuple(w2.shape) != (hid, s1.out_shape[1]):
            raise ValueError(f"shared.w2 must be [{hid}, {s1.out_shape[1]}] bf16, got {tuple(w2.shape)}")
        s2 = gemm.gemm_shape("TN", h.shape, w2.shape)
        gate_up = gemm.gate_up_array(shared.gate_up, s1, dev, stream, a=x, b=w1, output=h)
        y_s = cupy.empty((t, hid), np.float32)
        tma = gemm.arch_path() == "wgmma"
        return (*gemm.kernel_head(s1, x, w1, h, self._tmaps[2], tma, gate_up),
                *gemm.kernel_head(s2, h, w2, y_s, self._tmaps[3], tma)), y_s

    def _gemm_heads(self, w1: Any, w2: Any, gate_up: Any, stream: Any) -> tuple:
        """GEMM1's and GEMM2's kernel arguments (maps, problem, epilogue), checked."""
        import cupy

        from .. import gemm, grouped

        disp, dev = self.dispatch, self.world.device_id
        cap, hid = disp.capacity_rows, disp.row_bytes // 2
        arena = disp.arena.local.view(bfloat16).reshape(cap, hid)
        w1 = check_array(w1, "w1", dtypes=(bfloat16,), device=dev, stream=stream)
        w2 = check_array(w2, "w2", dtypes=(bfloat16,), device=dev, stream=stream)
        s1 = grouped.grouped_shape("TN", arena.shape, w1.shape, disp.e_loc, "swiglu")
        if self._h is None or self._h.shape != s1.out_shape:
            self._h = cupy.empty(s1.out_shape, bfloat16)
            self._heads_memo.clear()  # its entries hold the old buffer's address
        s2 = grouped.grouped_shape("TN", self._h.shape, w2.shape, disp.e_loc, "store")
        if s2.out_shape != (cap, hid):
            raise ValueError(f"w2 must be [{disp.e_loc}, {hid}, {s1.out_shape[1]}] bf16, got {tuple(w2.shape)}")
        if self._y_e is None:
            self._y_e = cupy.empty((cap, hid), bfloat16)
        gate_up = gemm.gate_up_array(gate_up, s1, dev, stream, a=arena, b=w1, output=self._h)
        tma = gemm.arch_path() == "wgmma"
        heads = (*grouped.kernel_head(s1, arena, w1, self._h, self._tmaps[0], 256, tma, gate_up),
                 *grouped.kernel_head(s2, self._h, w2, self._y_e, self._tmaps[1], 256, tma))
        return heads
