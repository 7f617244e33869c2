"""Run only under mpiexec (tests/test_mpi.py starts `mpiexec -n 4 python -m pytest tests/mpi`).

Every rank runs the same tests in the same order. After each test the ranks agree on its
outcome: if it failed on any rank it fails on every rank (naming the ranks), so ranks never
drift apart into mismatched collectives, and `-x` stops them all at the same test.
"""
from __future__ import annotations

import pytest
from mpi4py import MPI

COMM = MPI.COMM_WORLD


@pytest.fixture
def comm() -> MPI.Comm:
    return COMM


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # noqa: ANN001, ANN201
    outcome = yield
    if call.when != "call":
        return
    rep = outcome.get_result()
    failed_on = [r for r, f in enumerate(COMM.allgather(bool(rep.failed))) if f]
    if failed_on and not rep.failed:
        rep.outcome = "failed"
        rep.longrepr = f"{item.nodeid} failed on rank(s) {failed_on} (this is rank {COMM.rank})"


def pytest_report_header(config):  # noqa: ANN001, ANN201
    return f"MPI rank {COMM.rank} of {COMM.size}: {MPI.Get_library_version().splitlines()[0]}"
