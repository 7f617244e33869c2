"""GPU tests: run under MPI, one process per rank (several ranks may share one GPU).

    mpirun --allow-run-as-root --oversubscribe -np 4 python3 -m mpi4py -m pytest tests/gpu -q

Every rank runs the same tests in the same order; every test is collective.
"""
from __future__ import annotations

import numpy as np
import pytest

from kosmos.environment import probe_gpus

_probe = probe_gpus()
if _probe.problem:  # a GPU CuPy cannot use: fail the run with the fix, never skip
    pytest.exit(f"the GPU tests cannot run: {_probe.problem}", returncode=1)

cupy = pytest.importorskip("cupy")  # only reached without CuPy where there is no GPU either

import kosmos  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if _probe.count == 0:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=f"no GPU: {_probe.reason}"))


@pytest.fixture(scope="session")
def world():
    w = kosmos.World()
    yield w
    w.finalize()


def rank_input(seed: int, rank: int, shape, dtype) -> np.ndarray:
    """Rank `rank`'s input for a test: fresh, random, never zero; every rank can rebuild it."""
    rng = np.random.default_rng([seed, rank])
    x = rng.standard_normal(shape) + 0.1
    if np.dtype(dtype).kind in "iu":
        x = rng.integers(1, 100, shape)
    return x.astype(dtype)


def poisoned(shape, dtype):
    """An output buffer full of NaN (0xFF bytes: NaN in every float format)."""
    out = cupy.empty(shape, dtype)
    out.view(np.uint8).fill(0xFF)
    return out
