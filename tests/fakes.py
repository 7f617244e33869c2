"""A stand-in for an mpi4py communicator, for host logic tested without mpiexec."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np


class FakeComm:
    """One rank of a simulated world: collectives return what `peers(value)` says the world sent.

    By default the world is this rank alone (size 1). `peers` maps this rank's contribution to
    the list every rank contributed, which lets a test simulate disagreeing peers.
    """

    def __init__(self, rank: int = 0, size: int = 1, peers: Callable[[Any], list[Any]] | None = None,
                 local_size: int | None = None):
        self.rank, self.size = rank, size
        self.local_size = size if local_size is None else local_size
        self.peers = peers or (lambda v: [v] * size)
        self.freed = False
        self.barriers = 0

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return self.size

    def allgather(self, value: Any) -> list[Any]:
        out = self.peers(value)
        assert len(out) == self.size
        return out

    def Allgather(self, send: np.ndarray, recv: np.ndarray) -> None:
        rows = self.peers(np.array(send))
        for r, row in enumerate(rows):
            recv[r] = row

    def allreduce(self, value: Any, op: Any = None) -> Any:
        return sum(self.peers(value))

    def Split_type(self, split_type: Any, key: int = 0) -> "FakeComm":
        return FakeComm(self.rank % self.local_size, self.local_size)

    def Barrier(self) -> None:
        self.barriers += 1

    def Free(self) -> None:
        self.freed = True
