"""The MPI control plane for real: handles, counts, agreement and collective validation."""
from __future__ import annotations

import numpy as np
import pytest

from kosmos.errors import KosmosError
from kosmos.exchange import agree, all_ok, allgather_counts, allgather_handles, collectively


def fake_handle(rank: int) -> bytes:
    """64 bytes, like a cudaIpcMemHandle_t, different on every rank and with zero bytes inside."""
    return bytes((rank * 37 + i * 11) % 256 if i % 7 else 0 for i in range(64))


def test_world_is_four(comm) -> None:  # noqa: ANN001
    assert comm.size == 4, "tests/mpi is meant to run under mpiexec -n 4"


def test_allgather_handles(comm) -> None:  # noqa: ANN001
    out = allgather_handles(comm, fake_handle(comm.rank))
    assert out == [fake_handle(r) for r in range(comm.size)]
    assert all(type(h) is bytes and len(h) == 64 for h in out)


def test_allgather_handles_bytearray(comm) -> None:  # noqa: ANN001
    assert allgather_handles(comm, bytearray(fake_handle(comm.rank)))[comm.rank] == fake_handle(comm.rank)


def test_allgather_handles_of_different_lengths_fail_everywhere(comm) -> None:  # noqa: ANN001
    h = fake_handle(comm.rank)[: 32 if comm.rank == 2 else 64]
    with pytest.raises(KosmosError, match=r"different lengths across ranks: \[32, 64\]"):
        allgather_handles(comm, h)


def test_allgather_counts(comm) -> None:  # noqa: ANN001
    n = comm.size
    mine = np.array([comm.rank * 100 + d for d in range(n)], np.int32)  # e.g. rows for destination d
    out = allgather_counts(comm, mine)
    assert out.shape == (n, n) and out.dtype == np.int64
    assert out.tolist() == [[r * 100 + d for d in range(n)] for r in range(n)]
    # what every rank receives from everyone: the transpose's row
    assert out[:, comm.rank].tolist() == [r * 100 + comm.rank for r in range(n)]


def test_allgather_counts_large_values(comm) -> None:  # noqa: ANN001
    big = [2**40 + comm.rank, -1, 0]
    assert allgather_counts(comm, big)[:, 0].tolist() == [2**40 + r for r in range(comm.size)]


def test_allgather_counts_of_different_lengths_fail_everywhere(comm) -> None:  # noqa: ANN001
    with pytest.raises(KosmosError, match=r"count vectors of different lengths across ranks: \[3, 3, 3, 4\]"):
        allgather_counts(comm, [1] * (4 if comm.rank == 3 else 3))


def test_agree(comm) -> None:  # noqa: ANN001
    agree(comm, "shape", (128, 4096))


def test_disagreement_raises_on_every_rank(comm) -> None:  # noqa: ANN001
    shape = (128, 4096 + (1 if comm.rank == 1 else 0))
    with pytest.raises(KosmosError, match=r"ranks disagree on shape: rank 0: \(128, 4096\), rank 1: \(128, 4097\)"):
        agree(comm, "shape", shape)


def test_all_ok(comm) -> None:  # noqa: ANN001
    all_ok(comm, None)


def test_all_ok_raises_on_every_rank_when_one_errs(comm) -> None:  # noqa: ANN001
    err = ValueError("x is not contiguous") if comm.rank == 2 else None
    if comm.rank == 2:
        with pytest.raises(ValueError, match="x is not contiguous"):
            all_ok(comm, err)
    else:
        with pytest.raises(KosmosError, match=r"another rank rejected its input: rank 2: ValueError: x is not contiguous"):
            all_ok(comm, err)


def test_all_ok_names_every_failing_rank(comm) -> None:  # noqa: ANN001
    err = TypeError(f"bad dtype on {comm.rank}") if comm.rank % 2 else None
    with pytest.raises((KosmosError, TypeError)) as e:
        all_ok(comm, err)
    if comm.rank % 2 == 0:
        assert "rank 1: TypeError: bad dtype on 1" in str(e.value) and "rank 3: TypeError: bad dtype on 3" in str(e.value)
    # and everybody is still in step afterwards
    assert comm.allreduce(1) == comm.size


def test_collectively_fails_on_every_rank_and_undoes(comm) -> None:  # noqa: ANN001
    """A step that fails on rank 2 alone (an out-of-memory, a compile) raises on every rank; nobody hangs."""
    made: list = []

    def step() -> str:
        if comm.rank == 2:
            raise MemoryError("out of memory on rank 2")
        made.append("heap")
        return "heap"

    with pytest.raises((KosmosError, MemoryError)) as e:
        collectively(comm, "to allocate its symmetric heap", step, lambda r: made.remove(r))
    if comm.rank == 2:
        assert isinstance(e.value, MemoryError)
    else:
        assert "another rank failed to allocate its symmetric heap: rank 2: MemoryError" in str(e.value)
    assert made == []  # released everywhere
    assert comm.allreduce(1) == comm.size  # and everybody is still in step
