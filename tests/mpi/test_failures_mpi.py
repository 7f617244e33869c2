"""Host steps that fail on one rank alone, over real MPI with the GPU runtime faked: every rank raises
(none is left waiting in a collective), and every rank releases what it holds.

Covers the symmetric heap (allocation, IPC open, the peer-table upload) and the kernel compile on
node-local rank 0. The fakes record what was allocated, mapped, closed and freed.
"""
from __future__ import annotations

import types

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from kosmos import symmetric  # noqa: E402
from kosmos.errors import KosmosCompileError, KosmosError  # noqa: E402
from kosmos.runtime import module  # noqa: E402


class FakeRuntime:
    """The calls SymmetricHeap makes, on fake pointers; `fail` names the step that raises on `bad_rank`."""

    cudaIpcMemLazyEnablePeerAccess = 1

    def __init__(self, rank: int, fail: str = "", bad_rank: int = -1):
        self.rank, self.fail, self.bad = rank, fail, rank == bad_rank
        self.allocated: list[int] = []
        self.freed: list[int] = []
        self.opened: list[int] = []
        self.closed: list[int] = []

    def _maybe_fail(self, step: str) -> None:
        if self.bad and self.fail == step:
            raise MemoryError(f"{step} failed on rank {self.rank}")

    def malloc(self, n: int) -> int:
        self._maybe_fail("malloc")
        ptr = 0x1000_0000 * (self.rank + 1)
        self.allocated.append(ptr)
        return ptr

    def memset(self, *a) -> None:
        pass

    def deviceSynchronize(self) -> None:  # noqa: N802
        pass

    def ipcGetMemHandle(self, ptr: int) -> bytes:  # noqa: N802
        return ptr.to_bytes(64, "little")

    def ipcOpenMemHandle(self, handle: bytes, flags: int) -> int:  # noqa: N802
        if len(self.opened) == 1:  # fail on the second peer, after one mapping is open
            self._maybe_fail("open")
        ptr = int.from_bytes(handle, "little") + 0x100
        self.opened.append(ptr)
        return ptr

    def ipcCloseMemHandle(self, ptr: int) -> None:  # noqa: N802
        self.closed.append(ptr)

    def free(self, ptr: int) -> None:
        self.freed.append(ptr)


@pytest.fixture
def fake_gpu(comm, monkeypatch):  # noqa: ANN001, ANN201
    """(make_runtime, world): the GPU runtime faked on every rank, a World-like object over COMM_WORLD."""
    state = {}

    def make(fail: str = "", bad_rank: int = -1) -> FakeRuntime:
        rt = FakeRuntime(comm.rank, fail, bad_rank)
        state["rt"] = rt
        monkeypatch.setattr(cupy.cuda, "runtime", rt)
        monkeypatch.setattr(symmetric, "device_malloc", lambda n: rt.malloc(n))

        def upload(a):  # the peer table's upload: a device allocation that can fail too
            if rt.bad and rt.fail == "upload":
                raise MemoryError(f"upload failed on rank {comm.rank}")
            return np.asarray(a)

        monkeypatch.setattr(cupy, "asarray", upload)
        monkeypatch.setattr(symmetric.SymmetricHeap, "_load_barrier", lambda self: None)
        monkeypatch.setattr(symmetric.SymmetricHeap, "alloc", lambda self, shape, dtype: None)
        return rt

    heaps: list = []
    world = types.SimpleNamespace(comm=comm, local_comm=comm, rank=comm.rank, size=comm.size,
                                  local_rank=comm.rank, local_size=comm.size, require_gpu=lambda: None,
                                  register_heap=heaps.append)
    return make, world, heaps


@pytest.mark.parametrize("step", ["malloc", "open", "upload"])
def test_a_heap_step_failing_on_one_rank_raises_everywhere_and_releases_everything(comm, fake_gpu, step):
    if comm.size < 3:
        pytest.skip("needs 3 ranks")
    make, world, heaps = fake_gpu
    bad = comm.size - 1
    rt = make(step, bad)
    with pytest.raises((KosmosError, MemoryError)) as e:
        symmetric.SymmetricHeap(world, 1 << 20)
    if comm.rank == bad:
        assert isinstance(e.value, MemoryError)
    else:
        assert f"another rank failed to {'allocate its symmetric heap' if step == 'malloc' else 'open its peers'}" \
               in str(e.value) and f"rank {bad}: MemoryError" in str(e.value)
    assert heaps == []  # nothing registered
    assert sorted(rt.freed) == sorted(rt.allocated)  # every rank freed what it allocated
    assert sorted(rt.closed) == sorted(rt.opened)  # and closed every peer mapping it opened
    assert comm.allreduce(1) == comm.size  # every rank is still in step


def test_a_heap_that_succeeds_maps_every_peer(comm, fake_gpu):
    make, world, heaps = fake_gpu
    rt = make()
    heap = symmetric.SymmetricHeap(world, 1 << 20)
    assert heaps == [heap] and rt.freed == [] and len(rt.opened) == comm.size - 1
    assert heap.bases[comm.rank] == rt.allocated[0]
    assert all(heap.bases[r] == 0x1000_0000 * (r + 1) + 0x100 for r in range(comm.size) if r != comm.rank)


def test_a_compile_failing_on_local_rank_0_raises_everywhere(comm, monkeypatch):
    class FakeModule:
        def __init__(self, code, options, name_expressions):  # noqa: ANN001
            self.options = options

        def compile(self) -> None:
            if comm.rank == 0:
                raise RuntimeError("nvrtc: error: unknown option")

    monkeypatch.setattr(cupy, "RawModule", FakeModule)
    monkeypatch.setattr(cupy.cuda, "Device", lambda *a: types.SimpleNamespace(id=0))
    monkeypatch.setattr(module, "current_target", lambda: ("cuda", "sm_90a"))
    world = types.SimpleNamespace(comm=comm, local_comm=comm, size=comm.size, local_rank=comm.rank)
    with pytest.raises(KosmosError) as e:
        module.load_module("timing.hip", world=world, extra_options=(f"-DKOSMOS_MPI_TEST={comm.size}",))
    if comm.rank == 0:
        assert isinstance(e.value, KosmosCompileError)
    else:
        assert "another rank failed to compile hipsrc/timing.hip: rank 0: KosmosCompileError" in str(e.value)
    assert comm.allreduce(1) == comm.size
