"""The GPU-array adapter's logic on the CPU: CAI and DLPack producers read into CuPy views, no GPU touched.

Pointers here are never dereferenced (a CuPy array over them is made, not read); the functions that
ask the driver (which GPU a pointer is on, the current stream, the stream wait) are replaced by fakes. The GPU
side (real producers, stream waits, every op family) is tests/gpu/test_interop.py.
"""
from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from producers import CAIProducer, DLPackProducer  # noqa: E402

from kosmos import arrays  # noqa: E402
from kosmos.dtypes import bfloat16  # noqa: E402

PTR = 0x7F00_0000_0000  # 16-byte aligned, never read


class FakeStream:
    def __init__(self, ptr: int):
        self.ptr = ptr


@pytest.fixture
def no_driver(monkeypatch: pytest.MonkeyPatch) -> dict:
    """Replace the driver queries; record the stream waits the adapter asks for."""
    seen: dict = {"waits": []}
    monkeypatch.setattr(arrays, "_pointer_device", lambda ptr, name: 0)
    monkeypatch.setattr(arrays, "_consumer_stream", lambda stream: stream or FakeStream(0))
    monkeypatch.setattr(arrays, "_wait_for_producer", lambda producer, consumer: seen["waits"].append((producer, consumer.ptr)))
    return seen


def CAI(shape, typestr, *, data=(PTR, False), **fields) -> CAIProducer:  # noqa: N802 - reads like a class
    return CAIProducer(data[0], shape, typestr, readonly=data[1], **fields)


def test_cai_bf16_is_a_zero_copy_view(no_driver: dict) -> None:
    x = arrays.check_array(CAI(shape=(4, 8), typestr="<V2", strides=None), "x", dtypes=(bfloat16,), device=0)
    assert isinstance(x, cupy.ndarray)
    assert (x.shape, x.dtype, x.data.ptr, x.flags.c_contiguous) == ((4, 8), bfloat16, PTR, True)
    assert no_driver["waits"] == [(None, 0)]  # stream None: nothing to wait for


@pytest.mark.parametrize("typestr,dtype", [("<f4", np.float32), ("<u2", np.uint16), ("|u1", np.uint8),
                                           ("<i8", np.int64), ("|V2", bfloat16)])
def test_cai_typestrs(no_driver: dict, typestr: str, dtype) -> None:  # noqa: ANN001
    x = arrays.as_cupy(CAI(shape=(16,), typestr=typestr))
    assert x.dtype == np.dtype(dtype)


def test_cai_descr_naming_another_two_byte_type_is_refused() -> None:
    with pytest.raises(TypeError, match="not bfloat16"):
        arrays.dtype_from_typestr("<V2", [("my_half", "<V2")])
    assert arrays.dtype_from_typestr("<V2", [("bfloat16", "<V2")]) == bfloat16
    with pytest.raises(TypeError, match="big-endian"):
        arrays.dtype_from_typestr(">f4")


def test_cai_stream_is_waited_on(no_driver: dict) -> None:
    arrays.as_cupy(CAI(shape=(8,), typestr="<f4", stream=0x1234), stream=FakeStream(0x99))
    assert no_driver["waits"] == [(0x1234, 0x99)]


def test_cai_strides_and_checks(no_driver: dict) -> None:
    # a transposed [8, 4] float32 view: strides in bytes, not C-contiguous
    x = arrays.as_cupy(CAI(shape=(8, 4), typestr="<f4", strides=(4, 32)))
    assert x.strides == (4, 32) and not x.flags.c_contiguous
    with pytest.raises(ValueError, match="C-contiguous"):
        arrays.check_array(CAI(shape=(8, 4), typestr="<f4", strides=(4, 32)), "w")
    with pytest.raises(TypeError, match="w has dtype float32; expected one of \\['bfloat16'\\]"):
        arrays.check_array(CAI(shape=(8,), typestr="<f4"), "w", dtypes=(bfloat16,))
    with pytest.raises(ValueError, match="lives on GPU 0, but this rank's GPU is 1"):
        arrays.check_array(CAI(shape=(8,), typestr="<f4"), "x", device=1)
    with pytest.raises(ValueError, match="16-byte aligned"):
        arrays.check_array(CAI(shape=(8,), typestr="<f4", data=(PTR + 4, False)), "x")


def test_cai_refusals(no_driver: dict) -> None:
    with pytest.raises(ValueError, match="out is read-only"):
        arrays.as_cupy(CAI(shape=(8,), typestr="<f4", data=(PTR, True)), "out", writable=True)
    assert arrays.as_cupy(CAI(shape=(8,), typestr="<f4", data=(PTR, True))).data.ptr == PTR  # reading is fine
    with pytest.raises(TypeError, match="x: masked"):
        arrays.as_cupy(CAI(shape=(8,), typestr="<f4", mask=object()))
    with pytest.raises(ValueError, match="x: CUDA Array Interface stream 0 is disallowed"):
        arrays.as_cupy(CAI(shape=(8,), typestr="<f4", stream=0))
    with pytest.raises(TypeError, match="w: CUDA Array Interface version 1 is too old"):
        arrays.as_cupy(CAI(shape=(8,), typestr="<f4", version=1), "w")
    with pytest.raises(ValueError, match="null data pointer"):
        arrays.as_cupy(CAI(shape=(8,), typestr="<f4", data=(0, False)))


def test_cai_v2_has_no_stream(no_driver: dict) -> None:
    arrays.as_cupy(CAI(shape=(8,), typestr="<f4", version=2, stream=0x55))
    assert no_driver["waits"] == [(None, 0)]


def test_empty_and_0d(no_driver: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cupy, "empty", lambda shape, dtype: np.empty(shape, dtype))  # no GPU to allocate on
    assert arrays.as_cupy(CAI(shape=(0, 4), typestr="<f4", data=(0, False))).shape == (0, 4)
    x = arrays.as_cupy(CAI(shape=(), typestr="<f4"))
    assert x.shape == () and x.data.ptr == PTR


def test_host_arrays_and_strangers_are_refused() -> None:
    with pytest.raises(TypeError, match=r"x is a host array \(numpy.ndarray\).*cupy.asarray"):
        arrays.as_cupy(np.zeros(4, np.float32), "x")
    with pytest.raises(TypeError, match=r"w must be a GPU array .* got builtins.list"):
        arrays.as_cupy([1, 2], "w")


class BrokenCAI:
    """A producer whose __cuda_array_interface__ raises (older PyTorch for bf16: TypeError; a tensor that
    requires grad: RuntimeError), and that may offer DLPack instead."""

    def __init__(self, error: Exception):
        self.error = error

    @property
    def __cuda_array_interface__(self) -> dict:
        raise self.error


def test_a_cai_that_raises_is_reported() -> None:
    with pytest.raises(TypeError, match="x: dtype bfloat16 not supported"):
        arrays.as_cupy(BrokenCAI(TypeError("dtype bfloat16 not supported")))
    with pytest.raises(TypeError, match=r"x must be a GPU array .*its __cuda_array_interface__ raised RuntimeError: "
                                        "Can't get __cuda_array_interface__ on Variable that requires grad"):
        arrays.as_cupy(BrokenCAI(RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")))


# ---- DLPack: CuPy reads the capsule (tests/gpu/test_interop.py); what is refused before that ----
def test_dlpack_host_memory_and_other_devices_are_refused() -> None:
    for host in (1, 3, 11):  # kDLCPU, kDLCUDAHost, kDLROCMHost
        with pytest.raises(TypeError, match="x is a host array"):
            arrays.as_cupy(DLPackProducer(device=(host, 0)))
    with pytest.raises(TypeError, match="DLPack device type 14"):
        arrays.as_cupy(DLPackProducer(device=(14, 0)))


def test_stream_numbers() -> None:
    assert arrays.cai_stream_ptr(1) == 0 and arrays.cai_stream_ptr(2) == 2 and arrays.cai_stream_ptr(0x77) == 0x77
