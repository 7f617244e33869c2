"""MoEDispatch: token rows to their experts' owners in one launch, counts crossing ranks on the device.

    disp = MoEDispatch(world, experts=E, row_bytes=2 * H, capacity_rows=C)
    r = kosmos.moe.route(logits, cfg)                 # this rank's routing and dispatch plan
    arena, group_rows, run_rows = disp(x, r)          # x: [T, H] (any 2-byte or wider rows)

Every rank writes its per-expert counts into every rank's heap and waits for everybody's (the only
cross-rank barrier), lays out every owner's arena from them, and pushes each row straight to its
final place (hipsrc/kosmos/moe/dispatch.h): rows of local expert l from source 0, then source 1,
..., each source's in its dispatch order (token order). `arena[:group_rows.sum()]` is then the
expert-major input of the local experts' grouped GEMM (`group_rows`, int32 [E/P], on the device)
and `run_rows[l, s]` the rows of (l, s) (for gemm::RunsArrived). No host round trip: the counts
never leave the GPU. The arena is the plan's: consume it before the next call (the next call's
counts exchange waits for every rank to have launched it, i.e. to be done with this one on its stream).

A routing that would send any rank more than capacity_rows rows moves nothing, on every rank; the
rows it would have received are in `status` (0 = fine; -1: a rank refused its input), checked by
`check=True` (a host sync); group_rows and run_rows are zero then.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..arrays import check_array
from ..collectives import MOVER_THREADS
from ..errors import KosmosError
from ..exchange import agree_args
from ..plan import MAX_WORLD, SymmetricPlan
from ..runtime import PersistentLaunch, load_module, max_resident_blocks
from ..runtime.mirror import StructMirror, address, record
from ..runtime.status import WAIT_CTX_DTYPE
from ..runtime.streams import uses_stream
from ..world import World
from .route import DeviceRouting

_u64, _i32 = np.uint64, np.int32
DISPATCH_PARAMS_DTYPE = np.dtype(
    [("peer_bases", _u64), ("wait", WAIT_CTX_DTYPE), ("calls", _u64), ("flags_off", _u64), ("counts_off", _u64),
     ("arrived_off", _u64), ("arena_off", _u64), ("row_bytes", _u64), ("capacity", _u64), ("start", _u64),
     ("order", _u64), ("x", _u64), ("weights", _u64), ("run_done", _u64), ("group_rows", _u64), ("run_rows", _u64),
     ("all_counts", _u64), ("status", _u64), ("item_tables", _u64), ("tables_ready", _u64),
     ("rank", _i32), ("world", _i32), ("experts", _i32), ("e_loc", _i32), ("top_k", _i32), ("item_rows", _i32),
     ("refused", _i32)],
    align=True,
)
MIRRORS = [StructMirror("kosmos::moe::DispatchParams", DISPATCH_PARAMS_DTYPE)]


def fused_kernel_file(kernel: str) -> str:
    """The hipsrc file of a fused MoE kernel: kosmos_moe_forward -> moe_fused_forward.hip,
    kosmos_moe_backward_f32 -> moe_fused_backward_f32.hip (a file a kernel: they compile in parallel)."""
    prefix = "kosmos_moe_"
    if not kernel.startswith(prefix):
        raise ValueError(f"not a fused MoE kernel: {kernel!r}")
    return f"moe_fused_{kernel[len(prefix):]}.hip"


def fused_launch(world: World, kernel: str, table_bytes: int, instead: str) -> PersistentLaunch:
    """One of the fused MoE launches (hipsrc/moe_fused_*.hip: the builder's grid, block and shared
    memory); refused where the movers' tables (table_bytes) would not fit that shared memory."""
    from .. import gemm
    from ..runtime.launch import sm_count

    if table_bytes > gemm.shared_mem_bytes():
        raise ValueError(f"{world.size} ranks x these experts: the movers' tables ({table_bytes} B) do not fit the "
                         f"fused launch's shared memory ({gemm.shared_mem_bytes()} B); use {instead}")
    fn = load_module(fused_kernel_file(kernel), world=world, extra_options=gemm._extra_options).get_function(kernel)
    return PersistentLaunch.checked(fn, sm_count(), gemm.block_threads(), gemm.shared_mem_bytes())


def dispatch_smem_bytes(world: int, experts: int) -> int:
    """The dispatch's shared-memory tables (hipsrc/kosmos/moe/dispatch.h: dispatch_smem_bytes)."""
    return 4 * (world * experts + 2 * experts + 1)
ITEM_BYTES = 256 * 1024  # bytes an item moves (each item ends in a system-scope fence: 64 KB items spent
# 13 % of the dispatch in them on the H200, 1 MB items balance worse; bench notes in notes/moe.md)
SIDE_ITEM_BYTES = 32 * 1024  # the same where warps push (the fused kernels' side pushes, ExpertsLaunch.
# side_pushes): ~1 GB/s a warp, so a 256 KB item would hold a run's GEMM tiles back ~200 us


class MoEDispatch(SymmetricPlan):
    kernel_enum = "KERNEL_MOE_DISPATCH"
    device_epochs = True  # calls.h: a captured CUDA graph replays its launches

    def __init__(self, world: World, experts: int, row_bytes: int, capacity_rows: int, *,
                 item_rows: int | None = None, grid: int | None = None):
        import cupy

        world.require_gpu()
        agree_args(world.comm, "MoEDispatch", experts=experts, row_bytes=row_bytes, capacity_rows=capacity_rows,
                   item_rows=item_rows, grid=grid)
        P = world.size
        if P > MAX_WORLD:
            raise ValueError(f"MoEDispatch takes up to {MAX_WORLD} ranks, the world has {P}")
        if not isinstance(experts, int) or experts < 1 or experts % P:
            raise ValueError(f"experts = {experts!r} must be a positive multiple of the world size {P}")
        if not isinstance(row_bytes, int) or row_bytes < 16 or row_bytes % 16:
            raise ValueError(f"row_bytes = {row_bytes!r} must be a positive multiple of 16 (the movers' vectors)")
        if not isinstance(capacity_rows, int) or not 1 <= capacity_rows < 2**31:
            raise ValueError(f"capacity_rows = {capacity_rows!r} must be in [1, 2^31)")
        self.experts, self.e_loc, self.row_bytes, self.capacity_rows = experts, experts // P, row_bytes, capacity_rows
        if item_rows is not None and (not isinstance(item_rows, int) or not 1 <= item_rows <= 2**20):
            raise ValueError(f"item_rows = {item_rows!r} must be an integer in [1, 2^20]")
        self.item_rows = int(item_rows or max(1, ITEM_BYTES // row_bytes))
        if self.item_rows * (row_bytes // 16) >= 2**31:
            raise ValueError(f"item_rows = {self.item_rows} rows of {row_bytes} B: an item must be under 2^31 "
                             f"16-byte vectors (the movers' 32-bit indices)")
        counts_bytes = 2 * MAX_WORLD * experts * 4
        arrived_bytes = self.e_loc * MAX_WORLD * 8
        super().__init__(world, counts_bytes + arrived_bytes + capacity_rows * row_bytes + 3 * 256)
        self.counts = self.heap.alloc((2, MAX_WORLD, experts), np.int32)
        self.arrived = self.heap.alloc((self.e_loc, MAX_WORLD), np.uint64)
        self.arena = self.heap.alloc((capacity_rows, row_bytes), np.uint8)
        self.run_done = cupy.zeros((2, experts), np.uint64)
        self.group_rows = cupy.zeros(self.e_loc, np.int32)
        self.run_rows = cupy.zeros((self.e_loc, P), np.int32)
        self.all_counts = cupy.zeros((P, experts), np.int32)  # every rank's counts of the last call
        self.status = cupy.zeros(1, np.int64)
        self.item_tables = cupy.zeros(2 * experts + 1, np.int32)  # the fused kernels' side pushes read them
        self.tables_ready = cupy.zeros(1, np.uint64)
        self.side_item_rows = max(1, SIDE_ITEM_BYTES // row_bytes)
        smem = dispatch_smem_bytes(P, experts)
        mod = load_module("moe_dispatch.hip", world=world)
        # Resident, all of it: CTA 0 waits for runs other CTAs of this grid push.
        # As many CTAs as fit (memory-bound copies want requests in flight).
        fn = mod.get_function("kosmos_moe_dispatch")
        self.launch = PersistentLaunch.checked(fn, grid or max_resident_blocks(fn, MOVER_THREADS, smem),
                                               MOVER_THREADS, smem)
        cupy.cuda.runtime.deviceSynchronize()  # the zeroed counters, before a first call on any stream

    @uses_stream
    def __call__(self, x: Any, routing: DeviceRouting, *, weighted: bool = False, check: bool = False,
                 stream: Any = None) -> tuple[Any, Any, Any]:
        """(arena [capacity_rows, row_bytes] uint8, group_rows, run_rows); see the module docstring.
        weighted: x is bf16 and each pushed row is its token's row times the pair's routing weight
        (routing.weights, fp32), rounded to bf16 once (the backward's router-weighted dY).

        A rank whose arguments are refused still launches, sending counts of -1: every rank then
        moves nothing (status -1) instead of waiting out its budget for it, and this rank raises."""
        self._check_open()
        refusal = None
        try:
            x, start, order, weights, k = self._checked(x, routing, weighted, stream)
        except (TypeError, ValueError) as e:
            # a refusal launches anyway (its counts of -1 stop the peers' launches too)
            refusal, x, start, order, weights, k = e, None, None, None, None, 1
        rec = self._params(x, start, order, weights, k, refusal is not None, stream)
        self.launch([rec], stream=stream)
        if refusal is not None:
            raise refusal
        if check:
            self.check_status()
        return self.arena.local, self.group_rows, self.run_rows

    def _params(self, x: Any, start: Any, order: Any, weights: Any, k: int, refused: bool, stream: Any,
                side: bool = False) -> np.void:
        """This call's DispatchParams record; it takes the call's epoch, so build it right before
        the launch. refused: this rank refused its input (x, start, order, weights are not read).
        side: warps push rows too (a fused kernel's side pushes, ExpertsLaunch.side_pushes): items of
        side_item_rows, every pusher's."""
        w = self.world
        _, ctx = self._next_call(stream)
        return record(
            DISPATCH_PARAMS_DTYPE, peer_bases=self.heap.peer_bases.data.ptr, wait=ctx, calls=self.calls.data.ptr,
            flags_off=self.flags.offset, counts_off=self.counts.offset, arrived_off=self.arrived.offset,
            arena_off=self.arena.offset, row_bytes=self.row_bytes, capacity=self.capacity_rows,
            start=address(start), order=address(order), x=address(x), weights=address(weights),
            run_done=self.run_done.data.ptr,
            group_rows=self.group_rows.data.ptr, run_rows=self.run_rows.data.ptr,
            all_counts=self.all_counts.data.ptr, status=self.status.data.ptr, item_tables=self.item_tables.data.ptr,
            tables_ready=self.tables_ready.data.ptr, rank=w.rank, world=w.size, experts=self.experts,
            e_loc=self.e_loc, top_k=max(k, 1), item_rows=self.side_item_rows if side else self.item_rows,
            refused=int(refused))

    def check_status(self) -> None:
        """A host sync; raises if the last call failed, was refused by a rank or would have overflowed."""
        self.world.synchronize()
        self.world.status.raise_if_failed()
        worst = int(self.status.get()[0])
        if worst < 0:
            raise KosmosError("MoEDispatch: another rank refused its input; nothing was moved")
        if worst:
            raise KosmosError(f"MoEDispatch: a rank would receive {worst} rows, past capacity_rows = "
                              f"{self.capacity_rows}; nothing was moved")

    def _checked(self, x: Any, routing: DeviceRouting, weighted: bool, stream: Any) -> tuple:
        dev = self.world.device_id
        x = check_array(x, "x", device=dev, stream=stream)
        if x.ndim != 2 or x.shape[1] * x.dtype.itemsize != self.row_bytes:
            raise ValueError(f"x must be [T, rows of {self.row_bytes} B], got {tuple(x.shape)} of {x.dtype}")
        start = check_array(routing.start, "routing.start", dtypes=(np.dtype(np.int32),), device=dev, stream=stream)
        if start.shape != (self.experts + 1,):
            raise ValueError(f"routing.start must be [{self.experts + 1}] (this plan's experts), got {start.shape}")
        t = int(routing.experts.shape[0]) if routing.experts.ndim == 2 else -1
        k = int(routing.experts.shape[1]) if routing.experts.ndim == 2 else 0
        if int(x.shape[0]) != t:
            raise ValueError(f"the routing is for {t} tokens x top_k {k}; x has {x.shape[0]} tokens")
        weights = None
        if weighted:
            from ..dtypes import bfloat16

            if x.dtype != bfloat16:
                raise TypeError(f"weighted rows are bf16 (each scaled by its routing weight), got {x.dtype}")
            weights = check_array(routing.weights, "routing.weights", dtypes=(np.dtype(np.float32),), device=dev,
                                  stream=stream)
            if weights.shape != (t, k):
                raise ValueError(f"routing.weights must be [{t}, {k}], got {tuple(weights.shape)}")
        order = routing.order
        if order.shape != (t * k,):
            raise ValueError(f"routing.order must be [{t * k}], got {order.shape}")
        if t:
            order = check_array(order, "routing.order", dtypes=(np.dtype(np.int32),), device=dev, stream=stream)
        return x, start, order, weights, k
