"""The MPI control plane: what ranks tell each other on the host.

MPI carries only small things here (IPC handles, allocation offsets, per-destination or
per-expert counts, shape agreement); bulk data moves on the GPU. Pip's MPI builds are not
GPU-aware, so everything crosses as bytes or NumPy arrays in host memory.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .errors import KosmosError


def allgather_handles(comm: Any, handle: bytes) -> list[bytes]:
    """Every rank's IPC handle, in rank order; all handles must have the same length."""
    if not isinstance(handle, (bytes, bytearray)):
        raise TypeError(f"an IPC handle is bytes, got {type(handle).__name__}")
    handles = comm.allgather(bytes(handle))
    lengths = {len(h) for h in handles}
    if len(lengths) != 1:
        raise KosmosError(f"IPC handles of different lengths across ranks: {sorted(lengths)}")
    return handles


def allgather_counts(comm: Any, counts: Sequence[int] | np.ndarray) -> np.ndarray:
    """Stack every rank's int64 count vector into a [world, len] matrix (row r = rank r's)."""
    local = np.ascontiguousarray(counts, dtype=np.int64)
    if local.ndim != 1:
        raise ValueError(f"counts must be one-dimensional, got shape {local.shape}")
    lengths = comm.allgather(local.size)
    if len(set(lengths)) != 1:
        raise KosmosError(f"count vectors of different lengths across ranks: {lengths}")
    out = np.empty((comm.Get_size(), local.size), np.int64)
    comm.Allgather(local, out)
    return out


def agree(comm: Any, what: str, value: Any) -> None:
    """Raise the same clear error on every rank unless all ranks passed an equal `value`."""
    values = comm.allgather(value)
    if any(v != values[0] for v in values):
        detail = ", ".join(f"rank {r}: {v!r}" for r, v in enumerate(values))
        raise KosmosError(f"ranks disagree on {what}: {detail}")


def all_ok(comm: Any, error: BaseException | None) -> None:
    """Collective validation: if any rank failed a check, every rank raises (nobody launches alone)."""
    msgs = comm.allgather(None if error is None else f"{type(error).__name__}: {error}")
    if error is not None:
        raise error
    bad = [(r, m) for r, m in enumerate(msgs) if m is not None]
    if bad:
        raise KosmosError("another rank rejected its input: " + "; ".join(f"rank {r}: {m}" for r, m in bad))
