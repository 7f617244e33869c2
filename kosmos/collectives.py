"""Standalone mover collectives on CuPy arrays: all-gather, reduce-scatter, all-to-all.

Each op is a plan built once per shape (collectively, on every rank): it owns a symmetric heap
with its staging buffers and control words (hipsrc/kosmos/flags.h) and a checked persistent
launch. Calls only launch (with one rank, each collective is the identity: one memcpy into
`out`, no kernel). The functional forms (`all_gather(world, x)` ...) validate their
arguments on every rank, then reuse a cached plan.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from .arrays import check_array, refuse_overlap
from .dtypes import REDUCE_SUFFIX, bfloat16, copy_into, dtype_name, float32
from .errors import KosmosError
from .exchange import agree, agree_args, all_ok, allgather_counts
from .plan import SymmetricPlan
from .runtime import PersistentLaunch, load_module, sm_count
from .runtime.streams import uses_stream
from .world import World

MOVER_THREADS = 384  # the block size the fused kernels share between builders and movers
DEFAULT_ITEM_BYTES = 256 * 1024
RS_SENTINEL = {bfloat16: np.uint16(0x7FA5), float32: np.uint32(0x7FA5A5A5)}


class _CollectivePlan(SymmetricPlan):
    """A collective's plan: the heap, control words and epochs, and its persistent launch."""

    def __init__(self, world: World, heap_bytes: int, crew: int | None, threads: int, kernel: str):
        super().__init__(world, heap_bytes)
        self.threads = threads
        self.crew = crew or sm_count()
        # Loaded here, collectively (the compile is shared across ranks): never on a call, where a rank
        # that refused its arguments would leave the others waiting in the compile's agreement.
        self._launch: PersistentLaunch | None = None
        if world.size > 1:
            mod = load_module("collectives.hip", world=world)
            self._launch = PersistentLaunch.checked(mod.get_function(kernel), self.crew, self.threads)

    def _alone(self, x: Any, out: Any, stream: Any) -> Any:
        """World size 1: every collective is the identity, one memcpy into out (no kernel, no epoch)."""
        self._check_open()
        self.world.check()
        return copy_into(out, x, stream)

    def _common_args(self) -> tuple:
        w = self.world
        return (self.heap.peer_bases, np.int32(w.rank), np.int32(w.size))

    def _staged_call(self, x: Any, out: Any, in_shape: tuple[int, ...], part_bytes: int, stream: Any) -> Any:
        """All-gather's and reduce-scatter's call: x checked as in_shape, out as out_shape, then one
        launch through the staging buffer (part_bytes: the bytes each rank owns), or the identity alone."""
        x = self._check(x, "x", in_shape, self.dtype, stream)
        out = self._output(out, self.out_shape, self.dtype, stream)
        refuse_overlap("out", out, x=x)
        if self.world.size == 1:
            return self._alone(x, out, stream)
        epoch, ctx = self._next_call(stream)
        self._launch(
            self._common_args() + (epoch, np.uint64(self.flags.offset), np.uint64(self.staging.offset), x, out,
                                   np.uint64(part_bytes), np.uint64(self.item_bytes), ctx),
            stream=stream,
        )
        return out


class AllGather(_CollectivePlan):
    """out[p*m:(p+1)*m] = shard of rank p, for shards of shape `shard_shape` on every rank."""

    kernel_enum = "KERNEL_ALL_GATHER"

    def __init__(self, world: World, shard_shape: Sequence[int], dtype: Any, *, crew: int | None = None,
                 threads: int = MOVER_THREADS, item_bytes: int = DEFAULT_ITEM_BYTES):
        agree_args(world.comm, "AllGather", shard_shape=shard_shape, dtype=dtype, crew=crew, threads=threads,
                   item_bytes=item_bytes)
        self.shard_shape = tuple(int(s) for s in shard_shape)
        self.dtype = np.dtype(dtype)
        self.shard_bytes = math.prod(self.shard_shape) * self.dtype.itemsize
        if self.shard_bytes % 16:
            raise ValueError(f"all_gather moves 16-byte vectors: a shard of {self.shard_bytes} B is not a multiple of 16")
        if item_bytes % 16 or item_bytes <= 0:
            raise ValueError(f"item_bytes must be a positive multiple of 16, got {item_bytes}")
        super().__init__(world, self.shard_bytes, crew, threads, "kosmos_all_gather")
        self.item_bytes = item_bytes
        self.staging = self.heap.alloc((max(self.shard_bytes, 16),), np.uint8)

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.world.size * self.shard_shape[0],) + self.shard_shape[1:]

    @uses_stream
    def __call__(self, x: Any, out: Any = None, stream: Any = None) -> Any:
        return self._staged_call(x, out, self.shard_shape, self.shard_bytes, stream)


class ReduceScatter(_CollectivePlan):
    """out = sum over ranks of x_r[rank*m:(rank+1)*m], summed in fp32 in rank order, rounded once.

    One-shot pull: each element crosses the fabric once and is rounded once, so the result is
    bitwise reproducible. Arrival is detected from the data (a signalling-NaN sentinel);
    an input element equal to the sentinel is replaced by a quiet NaN (with one rank the call
    is a plain copy, and nothing is replaced).
    """

    kernel_enum = "KERNEL_REDUCE_SCATTER"

    def __init__(self, world: World, shape: Sequence[int], dtype: Any, *, crew: int | None = None,
                 threads: int = MOVER_THREADS, item_bytes: int = 64 * 1024):
        import cupy

        agree_args(world.comm, "ReduceScatter", shape=shape, dtype=dtype, crew=crew, threads=threads,
                   item_bytes=item_bytes)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        if self.dtype not in REDUCE_SUFFIX:
            raise TypeError(f"reduce_scatter sums bfloat16 or float32, not {dtype_name(self.dtype)}")
        if not self.shape or self.shape[0] % world.size:
            raise ValueError(f"reduce_scatter splits rows among {world.size} ranks; {self.shape} rows do not divide")
        total = math.prod(self.shape) * self.dtype.itemsize
        self.chunk_bytes = total // world.size
        if self.chunk_bytes % 16:
            raise ValueError(f"each rank's chunk ({self.chunk_bytes} B) must be a multiple of 16 bytes")
        super().__init__(world, 2 * total, crew, threads, f"kosmos_reduce_scatter_{REDUCE_SUFFIX[self.dtype]}")
        self.item_bytes = item_bytes
        self.staging = self.heap.alloc((2 * total // self.dtype.itemsize,), RS_SENTINEL[self.dtype].dtype)
        self.staging.local.fill(RS_SENTINEL[self.dtype])
        cupy.cuda.runtime.deviceSynchronize()
        world.comm.Barrier()  # every staging buffer is poisoned before any peer reads it

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.shape[0] // self.world.size,) + self.shape[1:]

    @uses_stream
    def __call__(self, x: Any, out: Any = None, stream: Any = None) -> Any:
        return self._staged_call(x, out, self.shape, self.chunk_bytes, stream)


def all_to_all_layout(counts: np.ndarray, rank: int) -> tuple[np.ndarray, int]:
    """From the [src, dst] row-count matrix: this rank's kernel plan and its received row count.

    plan = [rows to each dest | first row in x for each dest | first row in each dest's arena].
    Rows a destination receives are grouped by source rank, in rank order.
    """
    world = counts.shape[0]
    send = counts[rank]
    send_first = np.concatenate([[0], np.cumsum(send)[:-1]])
    arena_first = counts[:rank].sum(axis=0) if rank else np.zeros(world, np.int64)
    plan = np.concatenate([send, send_first, arena_first]).astype(np.int64)
    return plan, int(counts[:, rank].sum())


def exchange_send_counts(world: World, x: Any, send_counts: Sequence[int], row_shape: tuple[int, ...],
                         dtype: Any, stream: Any = None) -> tuple[Any, np.ndarray]:
    """Check x and send_counts on every rank, then all-gather the [src, dst] row-count matrix.

    Returns (x as a CuPy array, the matrix)."""
    err = None
    counts = np.zeros(world.size, np.int64)
    try:
        x = check_array(x, "x", dtypes=(np.dtype(dtype),), device=world.device_id, stream=stream)
        c = np.asarray(send_counts, np.int64)
        if c.shape != (world.size,) or (c < 0).any():
            raise ValueError(f"send_counts must be {world.size} non-negative row counts, got {send_counts}")
        if tuple(x.shape[1:]) != tuple(row_shape) or x.shape[0] != c.sum():
            raise ValueError(f"x has shape {x.shape}; expected ({int(c.sum())},) + {tuple(row_shape)}")
        counts = c
    except Exception as e:  # noqa: BLE001 - any refusal on one rank reaches every rank
        err = e
    all_ok(world.comm, err)
    return x, allgather_counts(world.comm, counts)


class AllToAll(_CollectivePlan):
    """Rows of x go to destination ranks by `send_counts` (x holds them destination-major).

    The output holds the rows this rank receives, grouped by source rank. Push: each source
    writes its rows straight into the destination's arena; capacity_rows bounds what any rank
    can receive in one call.
    """

    kernel_enum = "KERNEL_ALL_TO_ALL"

    def __init__(self, world: World, capacity_rows: int, row_shape: Sequence[int], dtype: Any, *,
                 crew: int | None = None, threads: int = MOVER_THREADS, item_rows: int | None = None):
        agree_args(world.comm, "AllToAll", capacity_rows=capacity_rows, row_shape=row_shape, dtype=dtype, crew=crew,
                   threads=threads, item_rows=item_rows)
        self.row_shape = tuple(int(s) for s in row_shape)
        self.dtype = np.dtype(dtype)
        self.row_bytes = math.prod(self.row_shape) * self.dtype.itemsize
        if self.row_bytes % 16 or self.row_bytes == 0:
            raise ValueError(f"all_to_all moves 16-byte vectors: a row of {self.row_bytes} B is not a multiple of 16")
        self.capacity_rows = int(capacity_rows)
        super().__init__(world, self.capacity_rows * self.row_bytes, crew, threads, "kosmos_all_to_all")
        self.item_rows = item_rows or max(1, DEFAULT_ITEM_BYTES // self.row_bytes)
        self.chunks_per_dest = max(1, -(-self.capacity_rows // self.item_rows))
        self.arena = self.heap.alloc((max(self.capacity_rows * self.row_bytes, 16),), np.uint8)

    @uses_stream
    def __call__(self, x: Any, send_counts: Sequence[int], stream: Any = None) -> tuple[Any, np.ndarray]:
        """Returns (received rows, recv_counts per source). Collective: exchanges counts over MPI."""
        x, matrix = exchange_send_counts(self.world, x, send_counts, self.row_shape, self.dtype, stream)
        return self._push(x, matrix, stream)

    def _push(self, x: Any, matrix: np.ndarray, stream: Any = None) -> tuple[Any, np.ndarray]:
        """The push, given x (checked) and the [src, dst] count matrix every rank holds (all-gathered)."""
        import cupy

        w = self.world
        if matrix.shape != (w.size, w.size) or (matrix < 0).any() or int(matrix[w.rank].sum()) != x.shape[0]:
            # Counts become offsets into peers' memory: never launch on a matrix that is not the exchanged one.
            raise KosmosError(f"all_to_all count matrix {matrix.tolist()} does not fit this world of {w.size} "
                              f"ranks and rank {w.rank}'s {x.shape[0]} rows")
        most = int(matrix.sum(axis=0).max())
        if most > self.capacity_rows:
            raise KosmosError(f"a rank would receive {most} rows; this plan's arena holds {self.capacity_rows}")
        plan, recv_rows = all_to_all_layout(matrix, w.rank)
        out = cupy.empty((recv_rows,) + self.row_shape, self.dtype)
        if w.size == 1:
            return self._alone(x, out, stream), matrix[:, w.rank].copy()
        plan_dev = cupy.asarray(plan)
        epoch, ctx = self._next_call(stream)
        self._launch(
            self._common_args() + (epoch, np.uint64(self.flags.offset), np.uint64(self.arena.offset), x, out,
                                   plan_dev, np.uint64(self.row_bytes), np.uint64(recv_rows),
                                   np.uint64(self.chunks_per_dest), np.uint64(self.item_rows), ctx),
            stream=stream,
        )
        self._plan_dev = plan_dev  # keep alive until the kernel has read it
        return out, matrix[:, w.rank].copy()


# ---- functional forms: collective validation, then a cached plan ----

def _plan_cache(world: World) -> dict:
    world.check()  # after a failure, stale plans are the same on every rank only once clear_failure ran
    cache = getattr(world, "_collective_plans", None)
    if cache is None:
        cache = world._collective_plans = {}
    # A device timeout invalidates every plan built before it: free those (collectively, same order everywhere).
    for key in [k for k, plan in cache.items() if plan.stale]:
        cache.pop(key).close()
    return cache


def _validated(world: World, x: Any, out: Any, what: str, out_shape: Callable[[tuple[int, ...]], tuple[int, ...]],
               dtypes: tuple[np.dtype, ...] | None = None) -> tuple[Any, Any]:
    """(x, out) as CuPy arrays (out may be None), checked on every rank, with x's shape and dtype the
    same everywhere. out_shape: out's shape for x's (it may raise)."""
    err = None
    try:
        x = check_array(x, "x", dtypes=dtypes, device=world.device_id)
        if x.ndim == 0:
            raise ValueError(f"{what} needs an array with a row axis, got a 0-d array")
        if out is not None:  # here, not only in the plan's call: there a refusal would stop this rank alone
            out = check_array(out, "out", dtypes=(x.dtype,), device=world.device_id, writable=True)
            if tuple(out.shape) != out_shape(tuple(x.shape)):
                raise ValueError(f"out has shape {tuple(out.shape)}; {what} writes {out_shape(tuple(x.shape))}")
            refuse_overlap("out", out, x=x)
    except Exception as e:  # noqa: BLE001 - any refusal on one rank reaches every rank
        err = e
    all_ok(world.comm, err)
    agree(world.comm, f"{what} input (shape, dtype)", (tuple(x.shape), dtype_name(x.dtype)))
    return x, out


def all_gather(world: World, x: Any, out: Any = None) -> Any:
    """Concatenate every rank's x along axis 0 (rank order). Collective."""
    x, out = _validated(world, x, out, "all_gather", lambda s: (world.size * s[0],) + s[1:])
    key = ("ag", x.shape, x.dtype)
    cache = _plan_cache(world)
    if key not in cache:
        cache[key] = AllGather(world, x.shape, x.dtype)
    return cache[key](x, out)


def _scattered_shape(shape: tuple[int, ...], world: int) -> tuple[int, ...]:
    if not shape or shape[0] % world:
        raise ValueError(f"reduce_scatter splits axis 0 among {world} ranks; shape {shape} does not divide")
    return (shape[0] // world,) + shape[1:]


def reduce_scatter(world: World, x: Any, out: Any = None) -> Any:
    """Sum x over ranks and return this rank's block of rows (rows split evenly). Collective."""
    x, out = _validated(world, x, out, "reduce_scatter", lambda s: _scattered_shape(s, world.size),
                        (bfloat16, float32))
    _scattered_shape(tuple(x.shape), world.size)  # (the same shape on every rank: every rank raises alike)
    key = ("rs", x.shape, x.dtype)
    cache = _plan_cache(world)
    if key not in cache:
        cache[key] = ReduceScatter(world, x.shape, x.dtype)
    return cache[key](x, out)


def all_to_all(world: World, x: Any, send_counts: Sequence[int]) -> tuple[Any, np.ndarray]:
    """Send x[rows of dest d] to rank d for every d; returns (received rows by source, recv counts)."""
    err = None
    try:
        x = check_array(x, "x", device=world.device_id)
        if x.ndim == 0:
            raise ValueError("x must have a row axis")
    except Exception as e:  # noqa: BLE001 - any refusal on one rank reaches every rank
        err = e
    all_ok(world.comm, err)
    agree(world.comm, "all_to_all row shape and dtype", (tuple(x.shape[1:]), dtype_name(x.dtype)))
    x, matrix = exchange_send_counts(world, x, send_counts, tuple(x.shape[1:]), x.dtype)
    most = int(matrix.sum(axis=0).max())
    cache = _plan_cache(world)
    # Every rank holds the same plans (built and closed collectively) and the same `most` (from the
    # all-gathered matrix), so every rank takes the same plan here, or builds the same one.
    kind = ("a2a", x.shape[1:], x.dtype)
    mine = sorted((k for k in cache if k[:3] == kind), key=lambda k: k[3])
    key = next((k for k in mine if k[3] >= most), None)  # the smallest plan that holds the call
    if key is None:
        capacity = 1 << max(10, (max(most, 1) - 1).bit_length())  # power-of-two buckets: few plans
        for smaller in mine:  # what they hold, the new plan holds: free their heaps first (collective)
            cache.pop(smaller).close()
        key = kind + (capacity,)
        cache[key] = AllToAll(world, capacity, x.shape[1:], x.dtype)
    return cache[key]._push(x, matrix)
