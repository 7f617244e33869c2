"""Any GPU array in: CuPy arrays as they are, and zero-copy CuPy views of anything that exposes the
CUDA Array Interface (v2, v3) or DLPack (0.x or 1.x capsules), without importing the framework
that made it (JAX, Numba, PyTorch, ...). Results are CuPy arrays, themselves CAI and DLPack producers.

Why not CuPy's importers: `cupy.from_dlpack` refuses bfloat16 ("CuPy does not support bfloat16 yet"),
and the CAI's bf16 typestr `<V2` names no CuPy dtype; bf16 is the dtype kosmos is for. cuda-core's
StridedMemoryView reads both, but only on CUDA (the user's GPUs are AMD). So both protocols are read
here, and the producer's memory is wrapped in a CuPy array whose owner keeps it alive.

Streams: a CAI v3 `stream` is ordered before the consuming stream by an event (device side, no host
wait); a DLPack producer is handed the consuming stream (`__dlpack__(stream=...)`) and orders its own
work before it, as the protocol says. The consuming stream is the op's `stream=` or the current one.
"""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from .dtypes import bfloat16, dtype_name, float8_e4m3, float8_e8m0

# ---- dtypes ----
# CAI typestrs that are bf16: numpy has no bf16, so producers describe it as 2 opaque bytes. kosmos has
# no other 2-byte opaque element, so `<V2` is read as bf16 (a `descr` naming another type is refused).
_BF16_TYPESTRS = ("<V2", "|V2")

# DLPack's DLDataTypeCode (dlpack.h v1.1) -> kosmos dtypes, for the codes kosmos reads.
DL_INT, DL_UINT, DL_FLOAT, DL_BFLOAT, DL_BOOL, DL_F8_E4M3FN, DL_F8_E8M0FNU = 0, 1, 2, 4, 6, 10, 14
_DLPACK_DTYPES = {
    (DL_INT, 8): np.dtype(np.int8), (DL_INT, 16): np.dtype(np.int16), (DL_INT, 32): np.dtype(np.int32),
    (DL_INT, 64): np.dtype(np.int64), (DL_UINT, 8): np.dtype(np.uint8), (DL_UINT, 16): np.dtype(np.uint16),
    (DL_UINT, 32): np.dtype(np.uint32), (DL_UINT, 64): np.dtype(np.uint64), (DL_FLOAT, 16): np.dtype(np.float16),
    (DL_FLOAT, 32): np.dtype(np.float32), (DL_FLOAT, 64): np.dtype(np.float64), (DL_BFLOAT, 16): bfloat16,
    (DL_BOOL, 8): np.dtype(np.bool_), (DL_F8_E4M3FN, 8): float8_e4m3, (DL_F8_E8M0FNU, 8): float8_e8m0,
}

# DLPack device types that are GPU memory this process can address.
DL_CUDA, DL_CUDA_HOST, DL_ROCM, DL_CUDA_MANAGED = 2, 3, 10, 13


def dtype_from_typestr(typestr: str, descr: Any = None) -> np.dtype:
    """The dtype of a CAI `typestr` (and `descr`): numpy's reading, with `<V2` as bf16."""
    if typestr in _BF16_TYPESTRS:
        names = [d[0] for d in descr or () if isinstance(d, (tuple, list)) and d and d[0]]
        if names and names[0] not in ("bfloat16", "bf16"):
            raise TypeError(f"a 2-byte opaque element named {names[0]!r} is not bfloat16")
        return bfloat16
    try:
        dt = np.dtype(typestr)
    except TypeError:
        raise TypeError(f"unknown CUDA Array Interface typestr {typestr!r}") from None
    if dt.byteorder == ">":
        raise TypeError(f"big-endian elements ({typestr!r}) are not supported")
    return dt


def dtype_from_dlpack(code: int, bits: int, lanes: int) -> np.dtype:
    if lanes != 1:
        raise TypeError(f"DLPack vector elements ({lanes} lanes) are not supported")
    dt = _DLPACK_DTYPES.get((code, bits))
    if dt is None:
        raise TypeError(f"DLPack element type (code {code}, {bits} bits) is not one kosmos reads")
    return dt


# ---- DLPack structs (dlpack.h) ----
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


# The deleter is called with the GIL held (PYFUNCTYPE), as CuPy and NumPy call it: a producer's
# deleter may release Python objects.
_DELETER = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


DLPACK_FLAG_READ_ONLY = 1
_CAPSULES = {b"dltensor": (_DLManagedTensor, b"used_dltensor"),
             b"dltensor_versioned": (_DLManagedTensorVersioned, b"used_dltensor_versioned")}

_api = ctypes.pythonapi
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]


class _DLPackOwner:
    """Owns a consumed DLPack tensor: calls the producer's deleter once the last view is gone."""

    def __init__(self, managed: int, deleter: Any, producer: Any):
        self.managed, self.deleter, self.producer = managed, deleter, producer

    def __del__(self) -> None:
        if self.deleter:
            self.deleter(self.managed)


class _Described:
    """What either protocol says about an array: where it is, its layout, who keeps it alive."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: np.dtype, strides: tuple[int, ...] | None,
                 readonly: bool, owner: Any, device: int | None):
        self.ptr, self.shape, self.dtype, self.readonly, self.owner, self.device = ptr, shape, dtype, readonly, owner, device
        self.strides = strides  # bytes; None = C-contiguous


def read_dlpack_capsule(capsule: Any, producer: Any) -> _Described:
    """Consume a DLPack capsule (renaming it `used_...`, so its own destructor leaves the tensor to us)."""
    for name, (struct, used) in _CAPSULES.items():
        if _api.PyCapsule_IsValid(capsule, name):
            break
    else:
        raise TypeError("__dlpack__ returned no unused 'dltensor' or 'dltensor_versioned' capsule")
    addr = _api.PyCapsule_GetPointer(capsule, name)
    managed = struct.from_address(addr)
    t = managed.dl_tensor
    readonly = bool(getattr(managed, "flags", 0) & DLPACK_FLAG_READ_ONLY)
    try:
        if hasattr(managed, "version") and managed.version.major != 1:
            raise TypeError(f"DLPack {managed.version.major}.{managed.version.minor} tensors are not readable "
                            "here (kosmos reads DLPack 1.x and unversioned capsules)")
        dtype = dtype_from_dlpack(t.dtype.code, t.dtype.bits, t.dtype.lanes)
        shape = tuple(int(t.shape[i]) for i in range(t.ndim))
        strides = None if not t.strides else tuple(int(t.strides[i]) * dtype.itemsize for i in range(t.ndim))
    except TypeError:
        _api.PyCapsule_SetName(capsule, used)
        if managed.deleter:
            managed.deleter(addr)
        raise
    _api.PyCapsule_SetName(capsule, used)
    owner = _DLPackOwner(addr, managed.deleter, producer)
    return _Described((t.data or 0) + t.byte_offset, shape, dtype, strides, readonly, owner, int(t.device.device_id))


def read_cai(obj: Any) -> tuple[_Described, int | None]:
    """(description, producer stream or None) from obj.__cuda_array_interface__."""
    cai = obj.__cuda_array_interface__
    if cai.get("mask") is not None:
        raise TypeError("masked CUDA arrays are not supported")
    version = int(cai.get("version", 0))
    if version < 2:
        raise TypeError(f"CUDA Array Interface version {version} is too old (kosmos reads v2 and v3)")
    dtype = dtype_from_typestr(cai["typestr"], cai.get("descr"))
    ptr, readonly = cai["data"]
    strides = cai.get("strides")
    stream = cai.get("stream") if version >= 3 else None
    if stream == 0:
        raise ValueError("CUDA Array Interface stream 0 is disallowed by the protocol (ambiguous)")
    desc = _Described(int(ptr or 0), tuple(int(s) for s in cai["shape"]), dtype,
                      None if strides is None else tuple(int(s) for s in strides), bool(readonly), obj, None)
    return desc, stream


# ---- streams and devices (the only parts that talk to the GPU) ----
def _consumer_stream(stream: Any) -> Any:
    import cupy

    return cupy.cuda.get_current_stream() if stream is None else stream


def dlpack_stream_arg(consumer_ptr: int, is_hip: bool) -> int:
    """The `stream` a DLPack consumer passes for its stream: CUDA's legacy default is 1, ROCm's default 0."""
    if consumer_ptr == 0:
        return 0 if is_hip else 1
    return consumer_ptr


def cai_stream_ptr(stream: int) -> int:
    """A CAI v3 stream number as a stream handle: 1 is the legacy default stream (handle 0)."""
    return 0 if stream == 1 else stream


def _wait_for_producer(producer: int | None, consumer: Any) -> None:
    if producer is None:
        return
    import cupy

    ptr = cai_stream_ptr(producer)
    if ptr == consumer.ptr:
        return
    event = cupy.cuda.Event(block=False, disable_timing=True, interprocess=False)
    event.record(cupy.cuda.ExternalStream(ptr) if ptr else cupy.cuda.Stream.null)
    consumer.wait_event(event)


def _pointer_device(ptr: int, name: str) -> int:
    """The GPU a device pointer lives on; a host pointer is refused."""
    import cupy

    try:
        attrs = cupy.cuda.runtime.pointerGetAttributes(ptr)
    except cupy.cuda.runtime.CUDARuntimeError as e:
        raise ValueError(f"{name} does not point to GPU memory ({e})") from None
    if attrs.type not in (2, 3):  # cudaMemoryTypeDevice, cudaMemoryTypeManaged
        raise ValueError(f"{name} points to host memory; kosmos ops take GPU arrays")
    return int(attrs.device)


def _wrap(desc: _Described) -> Any:
    """A CuPy array over the described memory (no copy)."""
    import cupy

    size = int(np.prod(desc.shape, dtype=np.int64)) if desc.shape else 1
    if size == 0:  # nothing to share; an empty array of the right shape
        return cupy.empty(desc.shape, desc.dtype)
    if not desc.ptr:
        raise ValueError("a non-empty array with a null data pointer")
    itemsize = desc.dtype.itemsize
    strides = desc.strides
    if strides is None:
        strides = tuple(int(np.prod(desc.shape[i + 1:], dtype=np.int64)) * itemsize for i in range(len(desc.shape)))
    lo = sum((n - 1) * s for n, s in zip(desc.shape, strides) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(desc.shape, strides) if s > 0) + itemsize
    mem = cupy.cuda.UnownedMemory(desc.ptr + lo, hi - lo, desc.owner, desc.device)
    return cupy.ndarray(desc.shape, desc.dtype, cupy.cuda.MemoryPointer(mem, -lo), strides=strides)


def _host_array_error(x: Any, name: str) -> TypeError:
    return TypeError(f"{name} is a host array ({type(x).__module__}.{type(x).__name__}); kosmos ops take GPU "
                     "arrays: copy it to the GPU first (cupy.asarray)")


def as_cupy(x: Any, name: str = "x", *, stream: Any = None, writable: bool = False) -> Any:
    """x as a CuPy array: itself, or a zero-copy view of a CAI or DLPack GPU array, ordered on `stream`."""
    import cupy

    if isinstance(x, cupy.ndarray):
        return x
    if isinstance(x, np.ndarray):
        raise _host_array_error(x, name)
    desc = None
    cai_error: Exception | None = None
    try:
        desc, producer_stream = read_cai(x)
    except AttributeError:  # no CUDA Array Interface
        pass
    except (TypeError, ValueError, KeyError) as e:  # e.g. PyTorch refuses its CAI for bf16: try DLPack
        cai_error = e
    else:
        _wait_for_producer(producer_stream, _consumer_stream(stream))
        desc.device = _pointer_device(desc.ptr, name) if desc.ptr else None  # empty: no memory
    if desc is None and hasattr(x, "__dlpack__"):
        dev_type, dev_id = x.__dlpack_device__() if hasattr(x, "__dlpack_device__") else (None, None)
        want = DL_ROCM if cupy.cuda.runtime.is_hip else DL_CUDA
        if dev_type not in (want, DL_CUDA_MANAGED):
            if dev_type in (1, DL_CUDA_HOST, 11):  # kDLCPU, pinned host memory
                raise _host_array_error(x, name)
            raise TypeError(f"{name} lives on DLPack device type {dev_type}, not a GPU this CuPy drives")
        consumer = _consumer_stream(stream)
        arg = dlpack_stream_arg(consumer.ptr, cupy.cuda.runtime.is_hip)
        try:
            capsule = x.__dlpack__(stream=arg, max_version=(1, 0))
        except TypeError:  # a producer older than DLPack 1.0 takes no max_version
            capsule = x.__dlpack__(stream=arg)
        desc = read_dlpack_capsule(capsule, x)
        desc.device = int(dev_id)
    if desc is None:
        why = f" (its CUDA Array Interface: {cai_error})" if cai_error else ""
        raise TypeError(f"{name} must be a GPU array (cupy.ndarray, or an object with __cuda_array_interface__ "
                        f"or __dlpack__), got {type(x).__module__}.{type(x).__name__}{why}")
    if writable and desc.readonly:
        raise ValueError(f"{name} is read-only; kosmos writes its result there")
    return _wrap(desc)


def check_array(x: Any, name: str, *, dtypes: tuple[np.dtype, ...] | None = None, device: int | None = None,
                stream: Any = None, writable: bool = False) -> Any:
    """x as a CuPy array (see as_cupy), checked: C-contiguous, 16-byte aligned, an accepted dtype, on `device`.

    Raises TypeError/ValueError naming `name` otherwise.
    """
    x = as_cupy(x, name, stream=stream, writable=writable)
    if dtypes is not None and x.dtype not in dtypes:
        raise TypeError(f"{name} has dtype {dtype_name(x.dtype)}; expected one of {[dtype_name(d) for d in dtypes]}")
    if not x.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (row-major); pass cupy.ascontiguousarray({name})")
    if device is not None and x.device.id != device:
        raise ValueError(f"{name} lives on GPU {x.device.id}, but this rank's GPU is {device}")
    if x.data.ptr % 16:
        raise ValueError(f"{name} must be 16-byte aligned")
    return x
