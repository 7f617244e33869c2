"""World: the MPI communicator, the rank -> GPU binding, and everything a rank owns on its GPU."""
from __future__ import annotations

from typing import Any

import numpy as np

from .environment import import_mpi, probe_gpus, usable_gpus
from .exchange import agree
from .errors import KosmosError, KosmosTimeoutError
from .runtime.streams import DeviceOrder, device_order

visible_gpus = usable_gpus  # GPUs CuPy can use; raises (naming the fix) where GPUs exist but CuPy cannot use them


# The GPU this process drives, bound by its first World with a GPU. A later World on a
# sub-communicator (a TP or an EP group) keeps it: by its rank in the smaller group it would pick
# another GPU (ranks {2, 3} of a node would take GPUs 0 and 1) and switch the process's device.
_process_gpu: int | None = None


class World:
    """One MPI rank per GPU (or several ranks per GPU, for tests), intranode only.

    ``World(comm)`` wraps an mpi4py communicator (default ``MPI.COMM_WORLD``), uses this process's
    GPU (bound by its first World with a GPU: ``local_rank % visible GPUs`` in that World's
    communicator; make it the whole job's, then build sub-communicator Worlds) and owns the rank's
    device status word. Use it as a
    context manager or call ``finalize()``; that frees every symmetric heap made from it.
    """

    def __init__(self, comm: Any = None, *, gpu: bool | None = None, wait_budget_s: float | None = None):
        MPI = import_mpi()
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank: int = self.comm.Get_rank()
        self.size: int = self.comm.Get_size()
        self.local_comm = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        self.local_rank: int = self.local_comm.Get_rank()
        self.local_size: int = self.local_comm.Get_size()
        spans = self.comm.allreduce(1 if self.local_size != self.size else 0)
        if spans:
            self.local_comm.Free()
            raise KosmosError(
                f"this world of {self.size} ranks spans several nodes ({self.local_size} on this one); "
                "kosmos is intranode only (peer GPU memory through IPC handles)"
            )
        ngpu = 0 if gpu is False else visible_gpus()
        if gpu is None:
            gpu = ngpu > 0
        if gpu and ngpu == 0:
            raise KosmosError(f"no GPU is visible to this process (World(gpu=True)): {probe_gpus().reason}")
        self.num_gpus = ngpu
        self.order = DeviceOrder()  # its ops run one after another on the device, whatever their stream (GPU: below)
        self.device_id: int | None = None
        self.oversubscribed = False
        self.status = None
        self._told: Any = None  # this rank's word of the failure heap (1 + p once rank p failed)
        self._failure: KosmosTimeoutError | None = None  # raised here and not cleared yet (clear_failure)
        self._heaps: list[Any] = []
        self._finalized = False
        if gpu:
            import cupy

            from .runtime.status import DEFAULT_BUDGET_S, DeviceStatus

            global _process_gpu
            if _process_gpu is None:
                _process_gpu = self.local_rank % ngpu
            self.device_id = _process_gpu
            cupy.cuda.Device(self.device_id).use()
            # One order per GPU, not per World: the ops of two Worlds on this GPU (TP and EP groups)
            # are persistent grids too, and must not overlap on two streams either.
            self.order = device_order(self.device_id)
            self.oversubscribed = self.local_size > ngpu
            self.status = DeviceStatus(self.rank, DEFAULT_BUDGET_S if wait_budget_s is None else wait_budget_s)
            if self.size > 1:  # a timeout anywhere is told to every rank through this heap (wait.h)
                from .symmetric import SymmetricHeap

                heap = SymmetricHeap(self, 4096)
                self._told = heap.alloc((1,), np.uint32)
                self.status.attach_world(self._told.local.data.ptr, heap.peer_bases.data.ptr, self._told.offset,
                                         self.size)

    # ---- GPU helpers ----
    def require_gpu(self) -> None:
        if self.device_id is None:
            raise KosmosError("this World has no GPU (made with gpu=False or none visible)")
        if self._finalized:
            raise KosmosError("this World was finalized")

    def synchronize(self) -> None:
        """Wait for this rank's GPU work, then raise KosmosTimeoutError if a device wait gave up here,
        or if a peer failed (told through the failure heap), even when no kernel of ours was waiting."""
        import cupy

        self.require_gpu()
        cupy.cuda.Device(self.device_id).synchronize()
        self.check()
        if self._told is not None:
            by = int(self._told.local.get()[0])  # after the sync: a 4-byte read
            if by:
                self.status.failures += 1  # plans built before it refuse to run
                self._failure = KosmosTimeoutError("KERNEL_NONE", self.rank, "SITE_NONE", self.status.budget_s,
                                                   failed_peer=by - 1)
                raise self._failure

    def clear_failure(self) -> None:
        """Collective: after a KosmosTimeoutError on any rank, make the World usable for new plans.

        Every rank waits for its GPU, then the failure words are cleared everywhere; plans built
        before stay refused on every rank (their device state is out of step)."""
        import cupy

        self.require_gpu()
        cupy.cuda.Device(self.device_id).synchronize()
        self.comm.Barrier()  # every rank's kernels have stopped: nobody tells anyone anymore
        if self._told is not None:
            self._told.local.fill(0)
        self.status.clear()
        self.status.failures += 1
        self._failure = None
        cupy.cuda.Device(self.device_id).synchronize()
        self.comm.Barrier()

    def check(self) -> None:
        """Raise if an earlier kernel of this rank recorded a timeout (no synchronization), and on
        every call after one until clear_failure(): nothing may launch into an inconsistent protocol."""
        if self._failure is not None:
            raise KosmosError(f"this World failed earlier ({self._failure.args[0].split('. ')[0]}); "
                              "call World.clear_failure() on every rank, then build new plans")
        if self.status is not None:
            try:
                self.status.raise_if_failed()
            except KosmosTimeoutError as e:
                self._failure = e
                raise

    def barrier(self) -> None:
        self.comm.Barrier()

    # ---- lifetime ----
    def register_heap(self, heap: Any) -> None:
        self._heaps.append(heap)

    def unregister_heap(self, heap: Any) -> None:
        if heap in self._heaps:
            self._heaps.remove(heap)

    def finalize(self) -> None:
        """Free every heap made from this world (collectively) and the status word."""
        if self._finalized:
            return
        if self.device_id is not None:
            import cupy

            cupy.cuda.Device(self.device_id).synchronize()
        # Freeing is collective per heap: ranks holding different heaps would pair the wrong ones and hang.
        agree(self.comm, "the symmetric heaps to free at finalize (bytes each, in order)",
              [h.nbytes for h in self._heaps])
        for heap in reversed(list(self._heaps)):
            heap.free()
        self._heaps.clear()
        if self.status is not None:
            self.status.free()
        self.local_comm.Free()
        self._finalized = True

    def __enter__(self) -> "World":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.finalize()

    def __repr__(self) -> str:
        gpu = f"gpu {self.device_id}" if self.device_id is not None else "no gpu"
        over = ", oversubscribed" if self.oversubscribed else ""
        return f"World(rank {self.rank}/{self.size}, local {self.local_rank}/{self.local_size}, {gpu}{over})"
