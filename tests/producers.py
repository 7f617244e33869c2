"""Minimal foreign-array producers, as a framework's C code would make them, for the interop tests:
an object with only `__cuda_array_interface__`, and one with only `__dlpack__` (its capsule built with
ctypes, so it can carry bf16, which CuPy cannot export through DLPack)."""
from __future__ import annotations

import ctypes
from typing import Any

from kosmos import arrays

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]

DL_CODES = {"bfloat16": (arrays.DL_BFLOAT, 16), "float32": (arrays.DL_FLOAT, 32), "uint8": (arrays.DL_UINT, 8),
            "float8_e4m3fn": (arrays.DL_F8_E4M3FN, 8), "int64": (arrays.DL_INT, 64), "complex64": (5, 64)}


class CAIProducer:
    """Exposes memory through the CUDA Array Interface only (v3; bf16 as `<V2`)."""

    def __init__(self, ptr: int, shape: tuple, typestr: str, *, strides=None, stream=None, readonly=False,
                 version: int = 3, keep: Any = None, **extra: Any):
        self.keep = keep  # what owns the memory (a CuPy array in the GPU tests)
        self.__cuda_array_interface__ = {"version": version, "data": (ptr, readonly), "shape": tuple(shape),
                                         "typestr": typestr, "strides": strides, "stream": stream, **extra}


def cai_of(a: Any, stream=None, readonly: bool = False) -> CAIProducer:
    """A CuPy array seen only through a CAI (its dtype's str: bf16 is `<V2`)."""
    return CAIProducer(a.data.ptr, a.shape, a.dtype.str, stream=stream, readonly=readonly, keep=a)


class DLPackProducer:
    """Exports memory through DLPack only; records the streams it was handed and its deleter calls."""

    def __init__(self, ptr: int, shape: tuple, dtype: str, *, strides=None, versioned: bool = True, flags: int = 0,
                 major: int = 1, device=(arrays.DL_CUDA, 0), byte_offset: int = 0, old: bool = False,
                 keep: Any = None):
        code, bits = DL_CODES[dtype]
        self.shape_c = (ctypes.c_int64 * len(shape))(*shape)
        self.strides_c = None if strides is None else (ctypes.c_int64 * len(strides))(*strides)
        self.deleted = 0
        self.streams: list = []
        self.device, self.old, self.keep = device, old, keep

        def deleter(_ptr: int) -> None:
            self.deleted += 1

        self.deleter = arrays._DELETER(deleter)
        t = arrays._DLTensor(ptr, arrays._DLDevice(*device), len(shape), arrays._DLDataType(code, bits, 1),
                             self.shape_c, self.strides_c, byte_offset)
        if versioned:
            self.managed = arrays._DLManagedTensorVersioned(arrays._DLPackVersion(major, 0), None, self.deleter,
                                                            flags, t)
            self.name = b"dltensor_versioned"
        else:
            self.managed = arrays._DLManagedTensor(t, None, self.deleter)
            self.name = b"dltensor"

    def __dlpack_device__(self) -> tuple:
        return self.device

    def __dlpack__(self, stream=None, max_version=None):  # noqa: ANN001, ANN201
        if self.old and max_version is not None:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        self.streams.append(stream)
        self.capsule = _api.PyCapsule_New(ctypes.addressof(self.managed), self.name, None)
        return self.capsule


def dlpack_of(a: Any, **kw: Any) -> DLPackProducer:
    """A CuPy array seen only through DLPack."""
    name = "bfloat16" if a.dtype.name == "bfloat16" else a.dtype.name
    return DLPackProducer(a.data.ptr, a.shape, name, device=(arrays.DL_CUDA, a.device.id), keep=a, **kw)


def capsule_name(capsule: Any) -> bytes:
    return _api.PyCapsule_GetName(capsule)
