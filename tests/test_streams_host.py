"""Host logic of streams, aliasing and symmetric allocation, on the CPU (the device side: tests/gpu/test_protocol.py)."""
from __future__ import annotations

import ctypes
import types

import pytest
from fakes import FakeComm

from kosmos import World, symmetric
from kosmos.arrays import refuse_overlap
from kosmos.errors import KosmosError, KosmosResourceError
from kosmos.runtime.streams import uses_stream


class FakeStream:
    def __init__(self) -> None:
        self.entered = 0

    def __enter__(self) -> "FakeStream":
        self.entered += 1
        return self

    def __exit__(self, *exc: object) -> None:
        pass


@uses_stream
def call(x: int, out: int | None = None, stream: FakeStream | None = None) -> int:
    return x


def test_uses_stream_makes_the_calls_stream_current() -> None:
    s = FakeStream()
    assert call(1, stream=s) == 1 and s.entered == 1
    assert call(2, None, s) == 2 and s.entered == 2  # positional
    assert call(3) == 3  # no stream: the current one, nothing entered


class Arr:
    def __init__(self, ptr: int, nbytes: int) -> None:
        self.data, self.nbytes = types.SimpleNamespace(ptr=ptr), nbytes


def test_refuse_overlap() -> None:
    out = Arr(1000, 100)
    refuse_overlap("out", out, x=Arr(1100, 50), w=Arr(900, 100), none=None)  # touching is not overlapping
    with pytest.raises(ValueError, match="out overlaps x in memory"):
        refuse_overlap("out", out, x=Arr(1099, 8))
    with pytest.raises(ValueError, match="dw overlaps dy"):
        refuse_overlap("dw", Arr(0, 64), dy=Arr(0, 64))  # the same array
    refuse_overlap("out", out, empty=Arr(1000, 0))


class FakeHip:
    def __init__(self, err: int = 0) -> None:
        self.err, self.calls = err, []

    def hipExtMallocWithFlags(self, ptr_ref, size, flags) -> int:  # noqa: ANN001, N802
        self.calls.append((size.value, flags.value))
        if not self.err:
            ctypes.cast(ptr_ref, ctypes.POINTER(ctypes.c_void_p))[0] = 0x7F00_0000_0000
        return self.err


def test_amd_heap_is_uncached_fine_grained(monkeypatch: pytest.MonkeyPatch) -> None:
    lib = FakeHip()
    assert symmetric.hip_ext_malloc(4096, symmetric.HIP_DEVICE_MALLOC_UNCACHED, lib) == 0x7F00_0000_0000
    assert lib.calls == [(4096, 0x3)]
    with pytest.raises(KosmosResourceError, match=r"hipExtMallocWithFlags\(4096 B, flags 0x3\) failed with hipError 2"):
        symmetric.hip_ext_malloc(4096, 0x3, FakeHip(err=2))
    seen = []
    monkeypatch.setattr(symmetric, "hip_ext_malloc", lambda n, flags: seen.append((n, flags)) or 0x1000)
    assert symmetric.device_malloc(256, is_hip=True) == 0x1000
    assert seen == [(256, symmetric.HIP_DEVICE_MALLOC_UNCACHED)]


def test_finalize_refuses_heap_lists_that_differ() -> None:
    comm = FakeComm(0, 2, peers=lambda v: [v, [4096] if isinstance(v, list) else v])  # rank 1 holds one heap
    w = World(comm, gpu=False)
    w._heaps = [types.SimpleNamespace(nbytes=4096), types.SimpleNamespace(nbytes=8192)]
    with pytest.raises(KosmosError, match=r"ranks disagree on the symmetric heaps to free at finalize"):
        w.finalize()
