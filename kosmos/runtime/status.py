"""The device status word and the bounded-wait context passed into every kernel.

The status word lives in host-mapped pinned memory: a kernel that times out writes
(kernel, rank, site) there and exits, and the host reads it without synchronizing.
Kernel and site names come from the enums in hipsrc/kosmos/wait.h, the one source of truth.
"""
from __future__ import annotations

import ctypes
import functools
import os
import re

import numpy as np

from ..errors import KosmosTimeoutError
from .source import hipsrc_dir

# WaitCtx in wait.h (checked against the C struct by tests/test_compile.py)
WAIT_CTX_DTYPE = np.dtype(
    [("status", np.uint64), ("abort", np.uint64), ("told", np.uint64), ("peers", np.uint64), ("told_off", np.uint64),
     ("budget_ns", np.uint64), ("kernel", np.uint32), ("rank", np.uint32), ("world", np.uint32),
     ("pad_", np.uint32)],
    align=True,
)

DEFAULT_BUDGET_S = float(os.environ.get("KOSMOS_WAIT_BUDGET_S", "30"))


def parse_enum(text: str, enum_name: str) -> dict[int, str]:
    """{value: NAME} of a C++ enum written one `NAME = number,` per line."""
    m = re.search(r"enum\s+" + enum_name + r"\b[^{]*\{(.*?)\};", text, re.S)
    if not m:
        raise ValueError(f"enum {enum_name} not found")
    return {int(v): k for k, v in re.findall(r"^\s*([A-Z0-9_]+)\s*=\s*(\d+)\s*,", m.group(1), re.M)}


@functools.lru_cache(maxsize=None)
def kernel_and_site_names() -> tuple[dict[int, str], dict[int, str]]:
    text = (hipsrc_dir() / "kosmos" / "wait.h").read_text()
    return parse_enum(text, "KernelId"), parse_enum(text, "WaitSite")


def kernel_id(name: str) -> int:
    """The KernelId value of e.g. 'KERNEL_ALL_GATHER'."""
    kernels, _ = kernel_and_site_names()
    for v, k in kernels.items():
        if k == name:
            return v
    raise KeyError(name)


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
        self.clear()

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
