"""kosmos.World without a GPU, on a simulated communicator (the real one: tests/mpi)."""
from __future__ import annotations

import pytest
from fakes import FakeComm

from kosmos import World
from kosmos.errors import KosmosError
from kosmos.world import visible_gpus


def test_single_rank_cpu_world() -> None:
    comm = FakeComm()
    w = World(comm, gpu=False)
    assert (w.rank, w.size, w.local_rank, w.local_size) == (0, 1, 0, 1)
    assert w.device_id is None and w.status is None and not w.oversubscribed
    assert "no gpu" in repr(w)
    w.check()  # nothing to check without a GPU
    with pytest.raises(KosmosError, match="has no GPU"):
        w.require_gpu()
    w.barrier()
    assert comm.barriers == 1
    w.finalize()
    w.finalize()  # idempotent


def test_context_manager_frees_the_local_comm() -> None:
    with World(FakeComm(2, 4), gpu=False) as w:
        assert (w.rank, w.size, w.local_rank, w.local_size) == (2, 4, 2, 4)
        local = w.local_comm
    assert local.freed


def test_refuses_a_world_that_spans_nodes() -> None:
    comm = FakeComm(5, 8, local_size=4)  # two nodes of four ranks
    with pytest.raises(KosmosError, match=r"this world of 8 ranks spans several nodes \(4 on this one\).*intranode only"):
        World(comm, gpu=False)


@pytest.mark.skipif(visible_gpus() > 0, reason="a GPU is visible here")
def test_gpu_world_without_a_gpu() -> None:
    with pytest.raises(KosmosError, match="no GPU is visible"):
        World(FakeComm(), gpu=True)


@pytest.mark.skipif(visible_gpus() > 0, reason="a GPU is visible here")
def test_default_is_cpu_world_without_a_gpu() -> None:
    w = World(FakeComm())
    assert w.device_id is None
    w.finalize()
