"""Unfused references: NCCL (through CuPy) for the collectives, and NumPy float64 for values.

NcclBaseline is the baseline the benchmarks race and the tests compare against. NCCL does
not support several ranks on one GPU, so `NcclBaseline.available(world)` is False for an
oversubscribed world; tests then compare against the float64 reference alone.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .dtypes import bfloat16, float32
from .world import World

# ncclDataType_t values (nccl.h); CuPy does not name bf16 in every version.
NCCL_TYPES = {np.dtype(np.int8): 0, np.dtype(np.uint8): 1, np.dtype(np.int32): 2, np.dtype(np.int64): 4,
              np.dtype(np.float16): 6, float32: 7, np.dtype(np.float64): 8, bfloat16: 9}
NCCL_SUM = 0


class NcclBaseline:
    """An NCCL communicator over the world's ranks, with the three collectives on CuPy arrays."""

    @staticmethod
    def unavailable_reason(world: World) -> str | None:
        """None where NCCL can run this world; otherwise why not, with the fix."""
        try:
            from cupy.cuda import nccl
        except Exception as e:  # noqa: BLE001 - reported as it is
            return f"CuPy's NCCL module failed to import ({type(e).__name__}: {e})"
        if not nccl.available:
            return ("CuPy found no NCCL library: pip install 'kosmos[cuda13]' (or [cuda12]; "
                    "they bring nvidia-nccl-cu13 / -cu12)")
        if world.oversubscribed:
            return "NCCL needs one rank per GPU, and ranks share a GPU here"
        return None

    @staticmethod
    def available(world: World) -> bool:
        return NcclBaseline.unavailable_reason(world) is None

    def __init__(self, world: World):
        from cupy.cuda import nccl

        why = self.unavailable_reason(world)
        if why:
            raise RuntimeError(f"no NCCL baseline: {why}")
        self.world = world
        self.nccl = nccl
        uid = world.comm.bcast(nccl.get_unique_id() if world.rank == 0 else None, root=0)
        self.comm = nccl.NcclCommunicator(world.size, uid, world.rank)

    @staticmethod
    def _stream(stream: Any) -> int:
        import cupy

        return (stream or cupy.cuda.get_current_stream()).ptr

    def all_gather(self, x: Any, out: Any, stream: Any = None) -> Any:
        self.comm.allGather(x.data.ptr, out.data.ptr, x.size, NCCL_TYPES[x.dtype], self._stream(stream))
        return out

    def reduce_scatter(self, x: Any, out: Any, stream: Any = None) -> Any:
        self.comm.reduceScatter(x.data.ptr, out.data.ptr, out.size, NCCL_TYPES[x.dtype], NCCL_SUM,
                                self._stream(stream))
        return out

    def all_to_all(self, x: Any, send_counts: Sequence[int], out: Any, recv_counts: Sequence[int],
                   stream: Any = None) -> Any:
        """Grouped send/recv (NCCL has no all-to-all-v); counts are in rows."""
        row = int(np.prod(x.shape[1:], dtype=np.int64))
        dt, s = NCCL_TYPES[x.dtype], self._stream(stream)
        so = ro = 0
        self.nccl.groupStart()
        for p in range(self.world.size):
            if send_counts[p]:
                self.comm.send(x.data.ptr + so * row * x.itemsize, int(send_counts[p]) * row, dt, p, s)
            if recv_counts[p]:
                self.comm.recv(out.data.ptr + ro * row * out.itemsize, int(recv_counts[p]) * row, dt, p, s)
            so += int(send_counts[p])
            ro += int(recv_counts[p])
        self.nccl.groupEnd()
        return out

    def all_to_all_rows(self, x: Any, send_counts: Sequence[int], stream: Any = None) -> tuple[Any, np.ndarray]:
        """all_to_all with the counts exchanged first (over MPI, as an NCCL user would): x holds its
        rows destination-major; returns (the received rows, source-major; rows per source)."""
        import cupy

        recv = np.asarray(self.world.comm.alltoall([int(c) for c in send_counts]), np.int64)
        out = cupy.empty((int(recv.sum()),) + tuple(x.shape[1:]), x.dtype)
        self.all_to_all(x, send_counts, out, recv, stream)
        return out, recv

    def close(self) -> None:
        self.comm.destroy()


# ---- float64 references ----

def reduce_scatter_exact(inputs: Sequence[np.ndarray], rank: int) -> np.ndarray:
    """What kosmos's reduce-scatter computes, bit for bit: fp32 sum in rank order, rounded once."""
    world = len(inputs)
    m = inputs[0].shape[0] // world
    acc = np.zeros((m,) + inputs[0].shape[1:], np.float32)
    for x in inputs:
        acc += x[rank * m:(rank + 1) * m].astype(np.float32)
    return acc.astype(inputs[0].dtype)


def reduce_scatter_f64(inputs: Sequence[np.ndarray], rank: int) -> np.ndarray:
    world = len(inputs)
    m = inputs[0].shape[0] // world
    return sum(x[rank * m:(rank + 1) * m].astype(np.float64) for x in inputs)


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    """Relative Frobenius error ||out - ref|| / ||ref|| in float64; NaN anywhere gives inf."""
    o, r = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    if not np.isfinite(o).all():
        return float("inf")
    return float(np.linalg.norm(o - r) / max(np.linalg.norm(r), 1e-300))
