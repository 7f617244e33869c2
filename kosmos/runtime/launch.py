"""Launching persistent grids: every CTA must be resident for the kernel's whole life.

A persistent kernel whose grid is larger than what fits at once would deadlock as soon as a
resident CTA waits on one that was never scheduled, so we check occupancy and refuse.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..errors import KosmosResourceError


def sm_count() -> int:
    import cupy

    return cupy.cuda.Device().attributes["MultiProcessorCount"]


def max_resident_blocks(kernel: Any, threads: int, shared_mem: int) -> int:
    """CTAs of `kernel` that can be resident at once on the whole GPU."""
    import cupy

    if shared_mem > 48 * 1024:
        kernel.max_dynamic_shared_size_bytes = shared_mem
    per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
        kernel.kernel.ptr, threads, shared_mem
    )
    return per_sm * sm_count()


@dataclass(frozen=True)
class PersistentLaunch:
    """A checked launch configuration: grid CTAs of `threads` threads and `shared_mem` bytes."""

    kernel: Any
    grid: int
    threads: int
    shared_mem: int = 0

    @classmethod
    def checked(cls, kernel: Any, grid: int, threads: int, shared_mem: int = 0) -> "PersistentLaunch":
        if grid < 1:
            raise ValueError(f"a persistent grid needs at least one CTA, got {grid}")
        resident = max_resident_blocks(kernel, threads, shared_mem)
        if grid > resident:
            raise KosmosResourceError(
                f"persistent grid of {grid} CTAs x {threads} threads with {shared_mem} B shared memory "
                f"cannot be fully resident: at most {resident} CTAs fit on this GPU "
                f"(registers per thread: {kernel.attributes.get('num_regs', '?')})"
            )
        return cls(kernel, grid, threads, shared_mem)

    def __call__(self, args: Sequence[Any], stream: Any = None) -> None:
        self.kernel((self.grid,), (self.threads,), tuple(args), shared_mem=self.shared_mem, stream=stream)
