"""kosmos.World on a real MPI world of 4 CPU ranks (no GPU used)."""
from __future__ import annotations

from mpi4py import MPI

from kosmos import World


def test_cpu_world(comm) -> None:  # noqa: ANN001
    with World(gpu=False) as w:
        assert w.comm is MPI.COMM_WORLD
        assert (w.rank, w.size) == (comm.rank, comm.size)
        # one node: the node-local communicator is the whole world, in world-rank order
        assert (w.local_rank, w.local_size) == (comm.rank, comm.size)
        assert w.device_id is None and not w.oversubscribed
        assert f"rank {comm.rank}/{comm.size}" in repr(w)
        w.barrier()
        local = w.local_comm
    assert local == MPI.COMM_NULL  # finalize freed it


def test_world_on_a_sub_communicator(comm) -> None:  # noqa: ANN001
    half = comm.Split(color=comm.rank % 2, key=comm.rank)
    try:
        with World(half, gpu=False) as w:
            assert w.size == comm.size // 2
            assert w.rank == comm.rank // 2
            assert w.local_size == w.size
    finally:
        half.Free()


def test_consecutive_worlds(comm) -> None:  # noqa: ANN001
    for _ in range(3):
        w = World(gpu=False)
        assert w.size == comm.size
        w.finalize()
