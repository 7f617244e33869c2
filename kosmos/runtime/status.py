"""The device status word and the bounded-wait context passed into every kernel.

The status word lives in host-mapped pinned memory: a kernel that times out writes
(kernel, rank, site) there and exits, and the host reads it without synchronizing.
Kernel and site names mirror the enums of hipsrc/kosmos/wait.h (checked at compile time).
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

from ..errors import KosmosTimeoutError

# WaitCtx in wait.h (checked against the C struct at compile time: kosmos.runtime.mirror)
WAIT_CTX_DTYPE = np.dtype(
    [("status", np.uint64), ("abort", np.uint64), ("told", np.uint64), ("peers", np.uint64), ("told_off", np.uint64),
     ("budget_ns", np.uint64), ("kernel", np.uint32), ("rank", np.uint32), ("world", np.uint32),
     ("pad_", np.uint32)],
    align=True,
)

DEFAULT_BUDGET_S = float(os.environ.get("KOSMOS_WAIT_BUDGET_S", "30"))


# KernelId and WaitSite of wait.h (checked against the enums at compile time: kosmos.runtime.mirror).
KERNELS = {
    "KERNEL_NONE": 0, "KERNEL_ALL_GATHER": 1, "KERNEL_REDUCE_SCATTER": 2, "KERNEL_ALL_TO_ALL": 3,
    "KERNEL_BARRIER": 4, "KERNEL_WAIT_PROBE": 5, "KERNEL_COPY_BENCH": 6, "KERNEL_GEMM": 7, "KERNEL_AG_GEMM": 8,
    "KERNEL_GEMM_RS": 9, "KERNEL_BULK_AG_GEMM": 10, "KERNEL_BULK_RS_GEMM": 11, "KERNEL_MOE_DISPATCH": 12,
    "KERNEL_MOE_COMBINE": 13,
}  # KERNEL_COUNT_ and SITE_COUNT_ (the enums' sizes) are checked against len() of these
SITES = {
    "SITE_NONE": 0, "SITE_PEER_DONE": 1, "SITE_PEER_READY": 2, "SITE_SENTINEL": 3, "SITE_PEER_ARRIVED": 4,
    "SITE_ARENA_FREE": 5, "SITE_BARRIER": 6, "SITE_PROBE": 7, "SITE_TILE_READY": 8, "SITE_GRID": 9,
}


# Status in wait.h: the 16 bytes of host-mapped memory a timed-out wait writes (DeviceStatus reads them).
STATUS_DTYPE = np.dtype([("code", np.uint32), ("kernel", np.uint32), ("rank", np.uint32), ("site", np.uint32)],
                        align=True)


def kernel_and_site_names() -> tuple[dict[int, str], dict[int, str]]:
    """({value: KernelId name}, {value: WaitSite name})."""
    return {v: k for k, v in KERNELS.items()}, {v: k for k, v in SITES.items()}


def kernel_id(name: str) -> int:
    """The KernelId value of e.g. 'KERNEL_ALL_GATHER'."""
    return KERNELS[name]


class DeviceStatus:
    """One rank's status word (4 x u32 in mapped pinned memory) and its device-side abort flag.

    Waiting threads poll the abort flag in device memory; only the first wait that gives up
    writes the host-visible record. With a World's failure heap attached (`attach_world`), a
    timeout is also told to every peer, and a peer's failure stops this rank's waits.
    """

    def __init__(self, rank: int, budget_s: float = DEFAULT_BUDGET_S):
        import cupy

        rt = cupy.cuda.runtime
        self.rank = rank
        self.budget_s = budget_s
        self._ptr = rt.hostAlloc(16, rt.hostAllocMapped | rt.hostAllocPortable)
        self._words = (ctypes.c_uint32 * 4).from_address(self._ptr)
        self.failures = 0  # timeouts seen so far; ops built before a failure refuse to run
        self._abort = cupy.zeros(1, np.uint32)
        self._world = (0, 0, 0, 1)  # (told word, peer table, its offset, world size): none alone
        for i in range(4):  # (not clear(): a fresh abort flag needs no device sync, so a status can
            self._words[i] = 0  # be made while a stream is being captured)

    def attach_world(self, told_ptr: int, peers_ptr: int, told_off: int, world: int) -> None:
        """Share failures with the World's peers through its failure heap (see wait.h)."""
        self._world = (told_ptr, peers_ptr, told_off, world)

    @property
    def device_ptr(self) -> int:
        return self._ptr  # unified addressing: the host pointer is valid on the device

    def wait_ctx(self, kernel: int, budget_s: float | None = None) -> np.void:
        ctx = np.zeros((), WAIT_CTX_DTYPE)
        ctx["status"] = self._ptr
        ctx["abort"] = self._abort.data.ptr if getattr(self, "_abort", None) is not None else 0
        ctx["budget_ns"] = int((self.budget_s if budget_s is None else budget_s) * 1e9)
        ctx["kernel"] = kernel
        ctx["rank"] = self.rank
        ctx["told"], ctx["peers"], ctx["told_off"], ctx["world"] = self._world
        return ctx[()]

    def clear(self) -> None:
        for i in range(4):
            self._words[i] = 0
        if getattr(self, "_abort", None) is not None:
            import cupy

            # After every kernel of this rank, on whatever stream it ran (only after a failure or at start).
            cupy.cuda.runtime.deviceSynchronize()
            self._abort.fill(0)
            cupy.cuda.runtime.deviceSynchronize()

    @property
    def failed(self) -> bool:
        """Whether a wait has failed since the last clear (host-mapped: no synchronization)."""
        return self._words[0] != 0

    def raise_if_failed(self) -> None:
        code, kernel, rank, site = (int(w) for w in self._words)
        if code == 0:
            return
        kernels, sites = kernel_and_site_names()
        self.failures += 1
        self.clear()
        raise KosmosTimeoutError(kernels.get(kernel, f"kernel#{kernel}"), rank, sites.get(site, f"site#{site}"),
                                 self.budget_s, failed_peer=None if code == 1 else code - 2)

    def free(self) -> None:
        if self._ptr:
            import cupy

            cupy.cuda.runtime.freeHost(self._ptr)
            self._ptr = 0
