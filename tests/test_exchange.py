"""kosmos.exchange on a simulated communicator (the real one runs in tests/mpi under mpiexec)."""
from __future__ import annotations

import numpy as np
import pytest
from fakes import FakeComm

from kosmos.errors import KosmosError
from kosmos.exchange import agree, agree_args, all_ok, allgather_counts, allgather_handles, collectively, comparable


def test_handles_single_rank() -> None:
    h = bytes(range(64))
    assert allgather_handles(FakeComm(), h) == [h]
    assert allgather_handles(FakeComm(), bytearray(h)) == [h]


def test_handles_in_rank_order() -> None:
    comm = FakeComm(1, 3, peers=lambda v: [b"\x00" * 64, v, b"\x02" * 64])
    out = allgather_handles(comm, b"\x01" * 64)
    assert out == [b"\x00" * 64, b"\x01" * 64, b"\x02" * 64]
    assert all(isinstance(h, bytes) for h in out)


def test_handles_must_be_bytes() -> None:
    with pytest.raises(TypeError, match="an IPC handle is bytes, got str"):
        allgather_handles(FakeComm(), "not bytes")  # type: ignore[arg-type]


def test_handles_of_different_lengths() -> None:
    comm = FakeComm(0, 2, peers=lambda v: [v, b"\x00" * 32])
    with pytest.raises(KosmosError, match=r"IPC handles of different lengths across ranks: \[32, 64\]"):
        allgather_handles(comm, b"\x00" * 64)


def test_counts_single_rank() -> None:
    out = allgather_counts(FakeComm(), [3, 0, 5])
    assert out.dtype == np.int64 and out.shape == (1, 3)
    assert out.tolist() == [[3, 0, 5]]


def test_counts_world() -> None:
    rows = {0: [1, 2], 1: [3, 4], 2: [5, 6]}
    comm = FakeComm(1, 3, peers=lambda v: [rows[0], v, rows[2]] if isinstance(v, np.ndarray) else [v] * 3)
    out = allgather_counts(comm, np.array(rows[1], np.int32))
    assert out.tolist() == [[1, 2], [3, 4], [5, 6]] and out.dtype == np.int64


def test_counts_must_be_1d() -> None:
    with pytest.raises(ValueError, match="one-dimensional"):
        allgather_counts(FakeComm(), np.zeros((2, 2)))


def test_counts_of_different_lengths() -> None:
    comm = FakeComm(0, 2, peers=lambda v: [v, v + 1])
    with pytest.raises(KosmosError, match=r"count vectors of different lengths across ranks: \[3, 4\]"):
        allgather_counts(comm, [1, 2, 3])


def test_agree() -> None:
    agree(FakeComm(), "shape", (4, 8))
    agree(FakeComm(0, 3), "shape", (4, 8))
    comm = FakeComm(0, 3, peers=lambda v: [v, v, (4, 9)])
    with pytest.raises(KosmosError, match=r"ranks disagree on shape: rank 0: \(4, 8\), rank 1: \(4, 8\), rank 2: \(4, 9\)"):
        agree(comm, "shape", (4, 8))


def test_all_ok_passes_when_everyone_is_ok() -> None:
    all_ok(FakeComm(0, 4), None)


def test_all_ok_reraises_own_error() -> None:
    comm = FakeComm(0, 2, peers=lambda v: [v, None])
    err = ValueError("x must be bf16")
    with pytest.raises(ValueError) as e:
        all_ok(comm, err)
    assert e.value is err


def test_all_ok_names_the_rank_that_failed() -> None:
    comm = FakeComm(0, 3, peers=lambda v: [v, "ValueError: x is not contiguous", None])
    with pytest.raises(KosmosError, match=r"another rank rejected its input: rank 1: ValueError: x is not contiguous"):
        all_ok(comm, None)


# ---- collectively: a host step that can fail on one rank alone ----
def test_collectively_returns_the_result_when_every_rank_succeeds() -> None:
    assert collectively(FakeComm(0, 3), "to compile x", lambda: 42) == 42


def test_collectively_reraises_this_ranks_error_without_undo() -> None:
    undone: list = []
    comm = FakeComm(1, 2, peers=lambda v: [None, v])

    def fail() -> int:
        raise MemoryError("out of memory allocating 4 GiB")

    with pytest.raises(MemoryError, match="out of memory"):
        collectively(comm, "to allocate", fail, undone.append)
    assert undone == []  # nothing was made here


def test_collectively_raises_and_undoes_where_a_peer_failed() -> None:
    undone: list = []
    comm = FakeComm(0, 3, peers=lambda v: [v, "KosmosCompileError: tp.hip: error", None])
    with pytest.raises(KosmosError, match=r"another rank failed to compile tp.hip: rank 1: KosmosCompileError"):
        collectively(comm, "to compile tp.hip", lambda: "module", undone.append)
    assert undone == ["module"]  # what this rank made is released before it raises


def test_comparable_values() -> None:
    import ml_dtypes

    assert comparable((np.int64(128), 64)) == (128, 64)  # numpy ints compare as ints
    assert comparable(np.dtype(ml_dtypes.bfloat16)) == "bfloat16" and comparable(np.float32) == "float32"
    assert comparable([1.5, None, "naive"]) == (1.5, None, "naive")


def test_collective_constructors_agree_on_every_argument() -> None:
    comm = FakeComm(0, 2, peers=lambda v: [v, [(k, 131072 if k == "item_bytes" else x) for k, x in v]])
    with pytest.raises(KosmosError, match=r"ranks disagree on AllGather arguments.*item_bytes', 262144.*item_bytes', 131072"):
        agree_args(comm, "AllGather", shard_shape=(128, 64), dtype=np.float32, item_bytes=262144)
