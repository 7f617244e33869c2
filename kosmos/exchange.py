"""The MPI control plane: what ranks tell each other on the host.

MPI carries only small things here (IPC handles, allocation offsets, per-destination or
per-expert counts, shape agreement); bulk data moves on the GPU. Pip's MPI builds are not
GPU-aware, so everything crosses as bytes or NumPy arrays in host memory.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence, TypeVar

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


def comparable(value: Any) -> Any:
    """A value as every rank can compare it: ints as int, dtypes by name, sequences as tuples, else repr."""
    if isinstance(value, (bool, str, type(None))):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (list, tuple)):
        return tuple(comparable(v) for v in value)
    try:
        return np.dtype(value).name if isinstance(value, (np.dtype, type)) else repr(value)
    except TypeError:
        return repr(value)


def agree_args(comm: Any, what: str, **args: Any) -> None:
    """Every rank passed the same arguments to a collective constructor (checked before anything else)."""
    agree(comm, f"{what} arguments", sorted((k, comparable(v)) for k, v in args.items()))


def all_ok(comm: Any, error: BaseException | None, what: str = "rejected its input") -> None:
    """Collective validation: if any rank failed a check, every rank raises (nobody launches alone).

    The failing rank raises its own error; the others a KosmosError naming each failing rank and why."""
    msgs = comm.allgather(None if error is None else f"{type(error).__name__}: {error}")
    if error is not None:
        raise error
    bad = [(r, m) for r, m in enumerate(msgs) if m is not None]
    if bad:
        raise KosmosError(f"another rank {what}: " + "; ".join(f"rank {r}: {m}" for r, m in bad))


T = TypeVar("T")


def collectively(comm: Any, what: str, step: Callable[[], T], undo: Callable[[T], None] | None = None) -> T:
    """Run `step` on every rank of `comm`; if it raised on any rank, every rank raises.

    The one pattern for host steps that can fail on one rank alone (a compile, an allocation, an IPC
    open): without it the others would wait forever in the next collective. Where `step` succeeded
    on this rank but failed on another, `undo(result)` releases what it made before raising.
    """
    result: Any = None
    error: BaseException | None = None
    try:
        result = step()
    except Exception as e:  # noqa: BLE001 - carried to every rank, then re-raised here
        error = e
    try:
        all_ok(comm, error, f"failed {what}")
    except KosmosError:
        if error is None and undo is not None:
            undo(result)
        raise
    return result
