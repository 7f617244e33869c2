"""SymmetricHeap: one raw device allocation per rank, mapped into every peer through IPC.

Every rank allocates the same number of bytes with a raw device allocation (an IPC handle names a
whole allocation, so pool sub-allocations will not do; on ROCm it is uncached fine-grained memory,
see device_malloc), all-gathers the handles over MPI and opens its peers'. Allocations from the
heap are collective and bump-allocated at the same offset on every rank, so the address of an
allocation on peer ``r`` is ``peer_bases[r] + offset``; kernels get ``peer_bases`` as a device table.
A step that fails on one rank (allocation, IPC open) raises on every rank, each releasing what it holds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import KosmosError, KosmosResourceError
from .exchange import agree, allgather_handles, collectively

if TYPE_CHECKING:
    import cupy
    from .world import World

ALIGN = 256  # bytes; covers 16-byte vectors and TMA's 128-byte alignment


def align_up(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


class BumpAllocator:
    """Offsets handed out in call order, each aligned; identical on every rank by construction."""

    def __init__(self, capacity: int, align: int = ALIGN):
        self.capacity, self.align, self.top = capacity, align, 0

    def take(self, nbytes: int) -> int:
        if nbytes < 0:
            raise ValueError(f"negative allocation size {nbytes}")
        off = align_up(self.top, self.align)
        if off + nbytes > self.capacity:
            raise KosmosResourceError(
                f"symmetric heap full: {nbytes} B requested at offset {off} of {self.capacity} B; "
                "make the heap larger (SymmetricHeap(world, nbytes=...))"
            )
        self.top = off + nbytes
        return off


@dataclass
class SymmetricArray:
    """An allocation at the same offset on every rank; ``local`` is this rank's CuPy view."""

    heap: "SymmetricHeap"
    offset: int
    local: "cupy.ndarray"

    @property
    def nbytes(self) -> int:
        return self.local.nbytes

    def peer_ptr(self, rank: int) -> int:
        return self.heap.bases[rank] + self.offset


class SymmetricHeap:
    """A rank's share of symmetric memory; create collectively on every rank of ``world``."""

    def __init__(self, world: "World", nbytes: int):
        import cupy

        world.require_gpu()
        agree(world.comm, "symmetric heap size", int(nbytes))
        rt = cupy.cuda.runtime
        self.world = world
        self.nbytes = align_up(int(nbytes))
        self._alloc = BumpAllocator(self.nbytes)
        self._opened: list[int] = []
        comm = world.comm

        # Each step can fail on one rank alone (out of memory is per process): every rank then
        # raises, and each releases what it holds.
        def allocate() -> tuple[int, bytes | None]:
            base = device_malloc(self.nbytes)
            try:
                rt.memset(base, 0, self.nbytes)  # flags start at zero
                rt.deviceSynchronize()
                return base, (bytes(rt.ipcGetMemHandle(base)) if world.size > 1 else None)
            except Exception:
                rt.free(base)
                raise

        self.base, handle = collectively(comm, "to allocate its symmetric heap", allocate,
                                         lambda made: rt.free(made[0]))
        bases = [0] * world.size
        bases[world.rank] = self.base

        def open_peers() -> tuple[list[int], Any]:
            """Map every peer's heap and upload the table of bases (an allocation: it can fail too)."""
            opened: list[int] = []
            try:
                for r, h in enumerate(handles):
                    if r != world.rank:
                        bases[r] = rt.ipcOpenMemHandle(h, rt.cudaIpcMemLazyEnablePeerAccess)
                        opened.append(bases[r])
                return opened, cupy.asarray(np.array(bases, dtype=np.uint64))
            except Exception:
                self._close(opened)
                raise

        try:
            handles = allgather_handles(comm, handle) if world.size > 1 else []
            self._opened, self.peer_bases = collectively(comm, "to open its peers' heaps", open_peers,
                                                         lambda made: self._close(made[0]))
        except Exception:
            comm.Barrier()  # every rank has closed what it opened of ours
            rt.free(self.base)
            self.base = 0
            raise
        self.bases: list[int] = bases
        comm.Barrier()  # nobody writes into a peer before that peer has zeroed its heap
        world.register_heap(self)
        self._barrier_flags = self.alloc((world.size,), np.uint64)
        self._barrier_epoch = 0
        self._barrier_kernel = self._load_barrier() if world.size > 1 else None  # collective: here, not on a call

    def _load_barrier(self) -> Any:
        from .runtime import PersistentLaunch, load_module

        mod = load_module("symmetric.hip", world=self.world)
        return PersistentLaunch.checked(mod.get_function("kosmos_heap_barrier"), 1, 64)

    def alloc(self, shape: Any, dtype: Any) -> SymmetricArray:
        """Collective: every rank must call alloc with the same shape and dtype, in the same order."""
        import cupy

        dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        off = self._alloc.take(nbytes)
        agree(self.world.comm, "symmetric allocation (offset, bytes)", (off, nbytes))
        mem = cupy.cuda.UnownedMemory(self.base + off, max(nbytes, 1), self)
        local = cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(mem, 0))
        return SymmetricArray(self, off, local)

    @property
    def used(self) -> int:
        return self._alloc.top

    def barrier(self, stream: Any = None) -> None:
        """A device-side barrier across ranks, ordered on `stream` (no host synchronization)."""
        from .runtime import kernel_id

        if self._barrier_kernel is None:  # alone: nothing collective about loading it
            self._barrier_kernel = self._load_barrier()
        self.world.order.join(stream)
        self._barrier_epoch += 1
        ctx = self.world.status.wait_ctx(kernel_id("KERNEL_BARRIER"))
        self._barrier_kernel(
            (self.peer_bases, np.uint64(self._barrier_flags.offset), np.int32(self.world.rank),
             np.int32(self.world.size), np.uint64(self._barrier_epoch), ctx),
            stream=stream,
        )

    @staticmethod
    def _close(opened: list[int]) -> None:
        import cupy

        for p in opened:
            cupy.cuda.runtime.ipcCloseMemHandle(p)

    def free(self) -> None:
        """Collective: close peers' mappings and free this rank's allocation."""
        import cupy

        if not self.base:
            return
        rt = cupy.cuda.runtime
        rt.deviceSynchronize()
        self.world.comm.Barrier()  # no peer still reads or writes our memory
        self._close(self._opened)
        self._opened = []
        self.world.comm.Barrier()  # every peer has closed its mapping of ours
        rt.free(self.base)
        self.base = 0
        self.world.unregister_heap(self)


def device_malloc(nbytes: int, *, is_hip: bool | None = None) -> int:
    """Device memory that peers may poll while a kernel runs, mappable through IPC.

    CUDA: plain cudaMalloc (coherent across peers at system scope). ROCm: plain hipMalloc memory is
    coarse-grained, and flags, counters and sentinels a peer polls inside a running kernel are not
    guaranteed visible there; uncached fine-grained memory is (RCCL allocates its flags so).
    """
    import cupy

    if not (cupy.cuda.runtime.is_hip if is_hip is None else is_hip):
        return int(cupy.cuda.runtime.malloc(nbytes))
    return hip_ext_malloc(nbytes, HIP_DEVICE_MALLOC_UNCACHED)


# hipExtMallocWithFlags flags (hip_runtime_api.h)
HIP_DEVICE_MALLOC_FINEGRAINED, HIP_DEVICE_MALLOC_UNCACHED = 0x1, 0x3


def hip_ext_malloc(nbytes: int, flags: int, lib: Any = None) -> int:
    """hipExtMallocWithFlags through ctypes (CuPy does not bind it); free it with hipFree."""
    import ctypes

    if lib is None:
        lib = ctypes.CDLL("libamdhip64.so", mode=ctypes.RTLD_GLOBAL)
    ptr = ctypes.c_void_p()
    err = lib.hipExtMallocWithFlags(ctypes.byref(ptr), ctypes.c_size_t(nbytes), ctypes.c_uint(flags))
    if err != 0 or not ptr.value:
        raise KosmosResourceError(f"hipExtMallocWithFlags({nbytes} B, flags {flags:#x}) failed with hipError {err}")
    return int(ptr.value)


def check_world_size(world_size: int, max_world: int = 16) -> None:
    if not 1 <= world_size <= max_world:
        raise KosmosError(f"world size {world_size} not supported (1..{max_world})")
