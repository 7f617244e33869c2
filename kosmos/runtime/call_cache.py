"""Eager calls checked once: what a call's checks and planning produced, keyed by all they read.

kosmos.matmul and grouped_matmul check their arrays (dtype, contiguity, device, alignment, overlap),
derive the GEMM's shape, look up its plan and build the kernel's argument records on every call:
~80 us of host time an eager call on the H200 machine, cupy.matmul's ~40 (notes/debug/host_profile.py,
session 32). All of it is a pure function of the arrays' addresses, shapes, strides and dtypes, the
call's options and the device, so a call whose signature was seen before skips to the launch.
Only CuPy arrays take this path: a foreign array is wrapped, and ordered on the stream, per call.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np


def array_signature(x: Any) -> tuple | None:
    """What the checks read of a CuPy array (None for None); raises TypeError for anything else."""
    import cupy

    if x is None:
        return None
    if type(x) is not cupy.ndarray:
        raise TypeError("not a CuPy array")
    return x.data.ptr, x.data.device_id, x.shape, x.strides, x.dtype  # (an address may recur on another GPU)


def call_signature(*arrays: Any, **options: Any) -> tuple | None:
    """The key of a call: its arrays' signatures, its options (hashable values) and the current
    device; None when an array is not a CuPy array (the call then takes the checked path)."""
    import cupy

    try:
        key = tuple(array_signature(x) for x in arrays), tuple(options.items()), cupy.cuda.runtime.getDevice()
        hash(key)  # an unhashable option: the checked path says what is wrong with it
    except TypeError:
        return None
    return key


def remember(cache: dict, key: Any, value: Any, size: int = 32) -> None:
    """cache[key] = value, starting the cache over past `size` entries (a pool reuses addresses,
    so a steady caller keeps hitting): the one bound of every memo of kernel arguments here."""
    if len(cache) >= size:
        cache.clear()
    cache[key] = value


class CallCache:
    """Results of checked calls by call_signature, at most `size` of them (then it starts over: a
    caller cycling through more arrays than that pays the checks again, nothing else)."""

    def __init__(self, size: int = 256):
        self._entries: dict[tuple, Any] = {}
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: tuple | None) -> Any:
        return None if key is None else self._entries.get(key)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def put(self, key: tuple | None, value: Any) -> None:
        if key is None:
            return
        with self._lock:
            remember(self._entries, key, value, self._size)


class HeldBuffers:
    """Device buffers an object keeps from call to call, by name: stable addresses, so the memos of
    its kernels' arguments keep hitting. A buffer is allocated again only when its shape or dtype
    changes, and then on_new() runs (a memo whose entries point into the old buffer starts over)."""

    def __init__(self, on_new: Callable[[], None] | None = None):
        self._buffers: dict[str, Any] = {}
        self._on_new = on_new

    def __call__(self, name: str, shape: tuple[int, ...], dtype: Any, rows: int | None = None,
                 zeroed: bool = False) -> Any:
        """Buffer `name` of `shape` and `dtype`, or its first `rows` rows; zeroed: allocated zero (what
        the caller never writes stays zero)."""
        import cupy

        buf = self._buffers.get(name)
        if buf is None or buf.shape != tuple(shape) or buf.dtype != np.dtype(dtype):
            buf = self._buffers[name] = (cupy.zeros if zeroed else cupy.empty)(shape, dtype)
            if self._on_new is not None:
                self._on_new()
        return buf if rows is None else buf[:rows]

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self._buffers.values())
