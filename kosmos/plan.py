"""What every kosmos op plan shares: its symmetric heap and control words, and the call epoch.

A plan is built once per shape, collectively (like an FFT plan); each call takes the next epoch
(the flags in hipsrc/kosmos/flags.h are compared with it, never reset) and a bounded-wait context.
A device timeout leaves the cross-rank protocol in an unknown state, so a plan built before one
refuses to run again. close() (or a with-block) frees the heap collectively; otherwise the
world frees it at finalize.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .arrays import check_array
from .errors import KosmosError
from .runtime import kernel_id
from .symmetric import SymmetricHeap, check_world_size
from .world import World

FLAG_WORDS = 64  # sizeof(OpFlags) / 8, see hipsrc/kosmos/flags.h
MAX_WORLD = 16   # kMaxWorld in flags.h


class SymmetricPlan:
    kernel_enum = ""  # the KernelId named in timeout errors
    # True where the kernels take their epoch from the device (hipsrc/kosmos/calls.h): only such a
    # plan may be captured in a CUDA graph (a replay of a host epoch would repeat it).
    device_epochs = False

    def __init__(self, world: World, heap_bytes: int):
        import cupy

        world.require_gpu()
        check_world_size(world.size, MAX_WORLD)
        self.world = world
        self.heap = SymmetricHeap(world, heap_bytes + FLAG_WORDS * 8 + 8192)
        self.flags = self.heap.alloc((FLAG_WORDS,), np.uint64)
        # device_epochs: calls done and CTAs out (calls.h), the kernels' epoch source; self.epoch then
        # counts the host's calls only (a replayed graph makes none), for callers' own checks
        self.calls = cupy.zeros(2, np.uint64) if self.device_epochs else None
        self.epoch = 0
        self._ctx: np.void | None = None
        self._budget_s: float | None = None
        self._failures_at_build = world.status.failures

    @property
    def stale(self) -> bool:
        """True once a device timeout happened after this plan was built."""
        return self.world.status.failures != self._failures_at_build

    def close(self) -> None:
        """Collective: free the plan's symmetric heap (the plan cannot be called again)."""
        if self.heap is not None:
            self.heap.free()
            self.heap = None

    def __enter__(self) -> "SymmetricPlan":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_open(self) -> None:
        if self.heap is None:
            raise KosmosError(f"{type(self).__name__} was closed")

    def _join(self, stream: Any) -> None:
        """Refuse a plan that may not run; then order what this call issues next on `stream` after
        every earlier launch of the GPU's World ops (device_order). _next_call does it; a call that
        writes the plan's own arrays before its launch does it first (joining again is free)."""
        self._check_open()
        self.world.check()
        if self.stale:
            raise KosmosError(f"{type(self).__name__} was built before a device timeout; build a new plan")
        self.world.order.join(stream, capturable=self.device_epochs, who=type(self).__name__)

    def _next_call(self, stream: Any) -> tuple[np.uint64, np.void]:
        """Epoch and wait context for the next launch, which goes on `stream` after every earlier
        launch of the GPU's World ops (device_order): a plan's epochs and queue heads assume its calls
        never overlap, and two persistent grids beside each other can deadlock across ranks."""
        self._join(stream)
        self.epoch += 1
        return np.uint64(self.epoch), self._wait_ctx()

    @property
    def wait_budget_s(self) -> float:
        """How long this op's device waits wait for a peer before giving up (default: the World's)."""
        return self.world.status.budget_s if self._budget_s is None else self._budget_s

    @wait_budget_s.setter
    def wait_budget_s(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError(f"wait_budget_s must be positive, got {seconds!r}")
        self._budget_s = float(seconds)
        self._ctx = None
        self._args = {}  # cached launch arguments hold the old context

    def _wait_ctx(self) -> np.void:
        """The bounded-wait context of this plan's kernel."""
        if self._ctx is None:
            self._ctx = self.world.status.wait_ctx(kernel_id(self.kernel_enum), budget_s=self._budget_s)
        return self._ctx

    def _check(self, x: Any, name: str, shape: tuple[int, ...], dtype: Any, stream: Any = None, *,
               writable: bool = False) -> Any:
        """x as a CuPy array (any GPU array goes in), raising unless it is a contiguous array of
        `dtype` and `shape` on this rank's GPU."""
        x = check_array(x, name, dtypes=(np.dtype(dtype),), device=self.world.device_id, stream=stream,
                        writable=writable)
        if tuple(x.shape) != tuple(shape):
            raise ValueError(f"{name} has shape {tuple(x.shape)}; this plan expects {tuple(shape)}")
        return x

    def _output(self, out: Any, shape: tuple[int, ...], dtype: Any, stream: Any = None, name: str = "out") -> Any:
        """`out` as a checked CuPy array, or a new array of that shape and dtype."""
        import cupy

        if out is None:
            return cupy.empty(shape, dtype)
        return self._check(out, name, shape, dtype, stream, writable=True)

