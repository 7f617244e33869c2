"""MoECombine: expert outputs back to their tokens' ranks and the fold, in one launch.

    comb = MoECombine(world, experts=E, hidden=H, max_tokens=T_max, top_k=k)
    y = comb(y_experts, disp, routing, shared=None)   # y_experts: [rows, H] bf16, the arena's order
                                                      # shared: fp32 [T, H] added before the one rounding

y_experts is this owner's expert output in its dispatch arena's order (expert-major, source-major:
what the grouped GEMMs on `MoEDispatch`'s arena give); the layout comes from the same call's
counts (`disp.all_counts`, on the device). Every row goes back to its source's combine buffer in
that source's dispatch order (hipsrc/kosmos/moe/combine.h); then each rank folds its tokens:
y[t] = sum_j w[t, j] * row(t, j) (+ shared[t]) in fp32, rounded to bf16 once. Call it after the
MoEDispatch call of the same forward, on the same stream. After a dispatch that overflowed (it
moved nothing, on every rank) the output is NaN and nothing waits.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..arrays import check_array
from ..collectives import MOVER_THREADS
from ..dtypes import bfloat16
from ..exchange import agree_args
from ..plan import MAX_WORLD, SymmetricPlan
from ..runtime import PersistentLaunch, load_module, max_resident_blocks
from ..runtime.mirror import StructMirror, address, record
from ..runtime.status import WAIT_CTX_DTYPE
from ..runtime.streams import uses_stream
from ..world import World
from .dispatch import ITEM_BYTES, MoEDispatch
from .route import DeviceRouting

_u64, _i32 = np.uint64, np.int32


def combine_smem_bytes(world: int, experts: int, e_loc: int) -> int:
    """The combine's shared-memory tables (hipsrc/kosmos/moe/combine.h: combine_smem_bytes)."""
    return 4 * (world * experts + 3 * e_loc * world + 1 + world + 3 * e_loc)
COMBINE_PARAMS_DTYPE = np.dtype(
    [("peer_bases", _u64), ("wait", WAIT_CTX_DTYPE), ("calls", _u64), ("flags_off", _u64), ("comb_off", _u64),
     ("row_bytes", _u64), ("all_counts", _u64), ("dispatch_status", _u64), ("y", _u64), ("run_done", _u64),
     ("slot", _u64), ("weights", _u64), ("shared", _u64), ("out", _u64), ("rank", _i32), ("world", _i32),
     ("experts", _i32), ("e_loc", _i32), ("top_k", _i32), ("tokens", _i32), ("item_rows", _i32), ("scope", _i32),
     ("own_in_place", _i32), ("own_runs", _u64)],
    align=True,
)
MIRRORS = [StructMirror("kosmos::moe::CombineParams", COMBINE_PARAMS_DTYPE)]


class MoECombine(SymmetricPlan):
    kernel_enum = "KERNEL_MOE_COMBINE"
    device_epochs = True  # calls.h: a captured CUDA graph replays its launches

    def __init__(self, world: World, experts: int, hidden: int, max_tokens: int, top_k: int, *,
                 grid: int | None = None):
        import cupy

        world.require_gpu()
        agree_args(world.comm, "MoECombine", experts=experts, hidden=hidden, max_tokens=max_tokens, top_k=top_k,
                   grid=grid)
        P = world.size
        if P > MAX_WORLD or experts < 1 or experts % P:
            raise ValueError(f"experts = {experts} must be a positive multiple of the world size {P} (<= {MAX_WORLD})")
        if hidden < 8 or hidden % 8:
            raise ValueError(f"hidden = {hidden} must be a positive multiple of 8 (16-byte bf16 vectors)")
        if max_tokens < 1 or top_k < 1 or max_tokens * top_k >= 2**31:
            raise ValueError(f"max_tokens = {max_tokens}, top_k = {top_k}: need 1 <= max_tokens * top_k < 2^31")
        self.experts, self.e_loc, self.hidden = experts, experts // P, hidden
        self.max_tokens, self.top_k = max_tokens, top_k
        self.row_bytes = 2 * hidden
        self.item_rows = max(1, ITEM_BYTES // self.row_bytes)
        super().__init__(world, max_tokens * top_k * self.row_bytes + 256)
        self.comb = self.heap.alloc((max_tokens * top_k, self.row_bytes), np.uint8)
        self.run_done = cupy.zeros((2, P), np.uint64)
        # this rank's own runs (layout.h own_runs), left by a call with own_in_place for the router's
        # backward (the backward's combine, on the same routing, leaves the same values)
        self.own_runs = cupy.zeros((3, self.e_loc), np.int32)
        self.own_rows_in_place = False  # whether the last call left them in place (a router's backward must
        #                                 then read them through own_runs)
        smem = combine_smem_bytes(P, experts, self.e_loc)
        mod = load_module("moe_combine.hip", world=world)
        # Resident, all of it: every CTA folds after waiting for rows other CTAs of this grid push.
        # As many CTAs as fit (memory-bound copies want requests in flight).
        fn = mod.get_function("kosmos_moe_combine")
        self.launch = PersistentLaunch.checked(fn, grid or max_resident_blocks(fn, MOVER_THREADS, smem),
                                               MOVER_THREADS, smem)
        cupy.cuda.runtime.deviceSynchronize()  # the zeroed counters, before a first call on any stream

    @uses_stream
    def __call__(self, y_experts: Any, dispatch: MoEDispatch, routing: DeviceRouting, shared: Any = None,
                 out: Any = None, own_in_place: bool = False, stream: Any = None) -> Any:
        """own_in_place: the rows this rank's own experts send it are folded from y_experts where
        they are, not copied into the combine buffer first (bitwise the same output); the buffer
        then lacks them, and `own_runs` says where they are (the router's backward reads them
        there: router_grads_record's own_y, own_runs)."""
        self._check_open()
        dev = self.world.device_id
        y_experts = check_array(y_experts, "y_experts", dtypes=(bfloat16,), device=dev, stream=stream)
        if y_experts.ndim != 2 or y_experts.shape[1] != self.hidden:
            raise ValueError(f"y_experts must be [rows, {self.hidden}] bf16, got {tuple(y_experts.shape)}")
        self._check_dispatch(dispatch)
        if y_experts.shape[0] < dispatch.capacity_rows:
            raise ValueError(f"y_experts needs the dispatch arena's {dispatch.capacity_rows} rows "
                             f"(rows past the counts are not read), got {y_experts.shape[0]}")
        shared, out, t = self.checked_outputs(routing, shared, out, stream)
        rec = self._params(y_experts, dispatch, routing.slot, routing.weights, shared, out, t, stream,
                           own_in_place=own_in_place)
        self.launch([rec], stream=stream)
        return out

    def _check_dispatch(self, dispatch: MoEDispatch) -> None:
        if dispatch.experts != self.experts or dispatch.world is not self.world:
            raise ValueError("the dispatch plan is for other experts or another world")

    def checked_outputs(self, routing: DeviceRouting, shared: Any, out: Any, stream: Any) -> tuple[Any, Any, int]:
        """(shared, out, tokens) for a call on `routing`, checked (out allocated when None)."""
        import cupy

        dev = self.world.device_id
        t, k = int(routing.experts.shape[0]), int(routing.experts.shape[1])
        if k != self.top_k or t > self.max_tokens:
            raise ValueError(f"the routing has {t} tokens x top_k {k}; this plan takes <= {self.max_tokens} x "
                             f"{self.top_k}")
        if shared is not None:
            shared = check_array(shared, "shared", dtypes=(np.dtype(np.float32),), device=dev, stream=stream)
            if shared.shape != (t, self.hidden):
                raise ValueError(f"shared must be [{t}, {self.hidden}] float32, got {tuple(shared.shape)}")
        if out is None:
            out = cupy.empty((t, self.hidden), bfloat16)
        else:
            out = check_array(out, "out", dtypes=(bfloat16,), device=dev, stream=stream, writable=True)
            if out.shape != (t, self.hidden):
                raise ValueError(f"out must be [{t}, {self.hidden}] bf16, got {tuple(out.shape)}")
        return shared, out, t

    def _params(self, y_experts: Any, dispatch: MoEDispatch, slot: Any, weights: Any, shared: Any, out: Any,
                tokens: int, stream: Any, scope: int = 0, own_in_place: bool = False) -> np.void:
        """This call's CombineParams record; it takes the call's epoch, so build it right before the
        launch. scope: the CallScope of its epoch (1 in the MoE forward kernel, moe/forward.py);
        own_in_place as __call__'s."""
        w = self.world
        _, ctx = self._next_call(stream)
        self.own_rows_in_place = bool(own_in_place)
        return record(
            COMBINE_PARAMS_DTYPE, peer_bases=self.heap.peer_bases.data.ptr, wait=ctx, calls=self.calls.data.ptr,
            flags_off=self.flags.offset, comb_off=self.comb.offset, row_bytes=self.row_bytes,
            all_counts=dispatch.all_counts.data.ptr, dispatch_status=dispatch.status.data.ptr,
            y=address(y_experts), run_done=self.run_done.data.ptr, slot=address(slot), weights=address(weights),
            shared=address(shared), out=address(out), rank=w.rank, world=w.size, experts=self.experts, e_loc=self.e_loc,
            top_k=self.top_k, tokens=tokens, item_rows=self.item_rows, scope=scope,
            own_in_place=int(bool(own_in_place)), own_runs=self.own_runs.data.ptr if own_in_place else 0)
