"""Any GPU array in: CuPy arrays as they are, and zero-copy CuPy views of anything that exposes the
CUDA Array Interface (v2, v3) or DLPack, without importing the framework that made it (JAX, Numba,
PyTorch, ...). Results are CuPy arrays, themselves DLPack producers (bf16 included), so JAX and PyTorch
take them back zero-copy (`jax.dlpack.from_dlpack(y)`, `torch.from_dlpack(y)`).

DLPack is read by CuPy (`cupy.from_dlpack`, which reads bf16 and fp8 as the ml_dtypes types from
CuPy 14), with the op's stream current, so the producer orders its work before that stream, as the
protocol says. The CUDA Array Interface is read here: CuPy's reader has no dtype for bf16's `<V2` and
waits for a producer's `stream` on the host; here that wait is an event on the consuming stream (the
op's `stream=` or the current one), so nothing stalls the host and graph capture is not broken.

A read-only CAI output is refused; through DLPack CuPy shows no read-only flag, so an output given as
an immutable DLPack array (a JAX array) is written anyway: pass outputs as CuPy or mutable arrays.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .dtypes import bfloat16, dtype_name

# ---- dtypes ----
# CAI typestrs that are bf16: numpy has no bf16, so producers describe it as 2 opaque bytes. kosmos has
# no other 2-byte opaque element, so `<V2` is read as bf16 (a `descr` naming another type is refused).
_BF16_TYPESTRS = ("<V2", "|V2")

# DLPack device types (dlpack.h): the GPU memory CuPy can address, and host memory (refused with a hint).
DL_CUDA, DL_ROCM, DL_CUDA_MANAGED = 2, 10, 13
DL_HOST = (1, 3, 11)  # kDLCPU, kDLCUDAHost, kDLROCMHost


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


class _Described:
    """What a CUDA Array Interface says about an array: where it is, its layout, who keeps it alive."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: np.dtype, strides: tuple[int, ...] | None,
                 readonly: bool, owner: Any):
        self.ptr, self.shape, self.dtype, self.readonly, self.owner = ptr, shape, dtype, readonly, owner
        self.strides = strides  # bytes; None = C-contiguous
        self.device: int | None = None


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
                      None if strides is None else tuple(int(s) for s in strides), bool(readonly), obj)
    return desc, stream


# ---- streams and devices (the only parts that talk to the GPU) ----
def _consumer_stream(stream: Any) -> Any:
    import cupy

    return cupy.cuda.get_current_stream() if stream is None else stream


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
    cupy.cuda.runtime.eventRecord(event.ptr, ptr)  # on the producer's raw stream handle
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


def _from_dlpack(x: Any, name: str, stream: Any) -> Any:
    import contextlib

    import cupy

    dev_type = x.__dlpack_device__()[0] if hasattr(x, "__dlpack_device__") else None
    if dev_type in DL_HOST:
        raise _host_array_error(x, name)
    if dev_type not in (DL_ROCM if cupy.cuda.runtime.is_hip else DL_CUDA, DL_CUDA_MANAGED):
        raise TypeError(f"{name} lives on DLPack device type {dev_type}, not a GPU this CuPy drives")
    with contextlib.nullcontext() if stream is None else stream:  # the producer orders its work before it
        try:
            return cupy.from_dlpack(x)
        except Exception as e:  # noqa: BLE001 - the producer's or CuPy's refusal, whatever its type
            raise TypeError(f"{name}: CuPy cannot read this DLPack array ({type(e).__name__}: {e})") from None


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
    refused: Exception | None = None  # a CAI that kosmos refuses (stream 0, a mask, ...)
    producer_error = ""  # the producer's own refusal to give a CAI (PyTorch: requires_grad, old versions: bf16)
    try:
        desc, producer_stream = read_cai(x)
    except AttributeError:  # no CUDA Array Interface
        pass
    except (TypeError, ValueError) as e:
        refused = e
    except Exception as e:  # noqa: BLE001 - whatever the producer raises
        producer_error = f" (its __cuda_array_interface__ raised {type(e).__name__}: {e})"
    else:
        try:
            _wait_for_producer(producer_stream, _consumer_stream(stream))
        except Exception as e:  # noqa: BLE001 - e.g. a destroyed or foreign stream
            raise ValueError(f"{name}: cannot wait for its CUDA Array Interface stream "
                             f"{producer_stream!r} ({type(e).__name__}: {e})") from None
        desc.device = _pointer_device(desc.ptr, name) if desc.ptr else None  # empty: no memory
    if desc is None and hasattr(x, "__dlpack__"):
        return _from_dlpack(x, name, stream)
    if refused is not None:
        raise type(refused)(f"{name}: {refused}") from None
    if desc is None:
        raise TypeError(f"{name} must be a GPU array (cupy.ndarray, or an object with __cuda_array_interface__ "
                        f"or __dlpack__), got {type(x).__module__}.{type(x).__name__}{producer_error}")
    if writable and desc.readonly:
        raise ValueError(f"{name} is read-only; kosmos writes its result there")
    return _wrap(desc)


def refuse_overlap(name: str, out: Any, **inputs: Any) -> None:
    """Raise unless the (contiguous) output's memory is disjoint from each input's: the kernels read
    their inputs while they write their output, so an alias gives a wrong result, not an error."""
    lo, hi = out.data.ptr, out.data.ptr + out.nbytes
    for what, a in inputs.items():
        if a is not None and a.nbytes and out.nbytes and lo < a.data.ptr + a.nbytes and a.data.ptr < hi:
            raise ValueError(f"{name} overlaps {what} in memory; kosmos ops write their output while they "
                             "still read their inputs: pass a separate output array")


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
