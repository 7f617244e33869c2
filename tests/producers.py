"""Minimal foreign-array producers for the interop tests: an object with only `__cuda_array_interface__`,
and one with only `__dlpack__` (as JAX's arrays are for bf16, whose CAI JAX refuses)."""
from __future__ import annotations

from typing import Any


class CAIProducer:
    """Exposes memory through the CUDA Array Interface only (v3 by default; bf16 as `<V2`)."""

    def __init__(self, ptr: int, shape: tuple, typestr: str, *, strides=None, stream=None, readonly=False,
                 version: int = 3, keep: Any = None, **extra: Any):
        self.keep = keep  # what owns the memory (a CuPy array in the GPU tests)
        self.__cuda_array_interface__ = {"version": version, "data": (ptr, readonly), "shape": tuple(shape),
                                         "typestr": typestr, "strides": strides, "stream": stream, **extra}


def cai_of(a: Any, stream=None, readonly: bool = False) -> CAIProducer:
    """A CuPy array seen only through a CAI (its dtype's str: bf16 is `<V2`)."""
    return CAIProducer(a.data.ptr, a.shape, a.dtype.str, stream=stream, readonly=readonly, keep=a)


class DLPackProducer:
    """Exports an array through DLPack only; records the streams the consumer handed it."""

    def __init__(self, a: Any = None, device: tuple = (2, 0)):
        self.a = a
        self.device = device if a is None else a.__dlpack_device__()
        self.streams: list = []

    def __dlpack_device__(self) -> tuple:
        return self.device

    def __dlpack__(self, **kw: Any) -> Any:
        self.streams.append(kw.get("stream"))
        return self.a.__dlpack__(**kw)


def dlpack_of(a: Any) -> DLPackProducer:
    return DLPackProducer(a)
