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


def test_a_sub_communicator_world_keeps_the_process_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first World with a GPU binds the process's GPU (its local rank % GPUs); a later World on a
    sub-communicator (local rank 0 of a TP group) keeps it instead of taking GPU 0."""
    import types

    cupy = pytest.importorskip("cupy")
    from kosmos import world
    from kosmos.runtime import status

    used = []
    monkeypatch.setattr(world, "_process_gpu", None)
    monkeypatch.setattr(world, "visible_gpus", lambda: 8)
    monkeypatch.setattr(cupy.cuda, "Device", lambda i: types.SimpleNamespace(use=lambda: used.append(i)))
    monkeypatch.setattr(status, "DeviceStatus", lambda rank, budget: types.SimpleNamespace(failures=0))
    class NodeComm(FakeComm):  # a one-rank communicator whose rank on the node is `node_rank`
        def __init__(self, node_rank: int):
            super().__init__()
            self.node_rank = node_rank

        def Split_type(self, split_type, key=0):  # noqa: ANN001
            return FakeComm(self.node_rank, 1)

    job = World(NodeComm(3), gpu=True)  # local rank 3 of the node: GPU 3
    assert job.device_id == 3
    group = World(NodeComm(1), gpu=True)  # local rank 1 in a smaller group: still GPU 3
    assert group.device_id == 3 and used == [3, 3]
