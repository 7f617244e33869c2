"""Top-level test configuration: what `python -m pytest tests` collects.

- tests/mpi/ runs only under mpiexec: tests/test_mpi.py spawns `mpiexec -n 4 python -m pytest tests/mpi`
  with KOSMOS_MPI_TESTS=1, the only way it is collected.
- tests/gpu/ is collected only when CuPy can use a GPU (run it under mpirun: see README). On a machine
  without one it is left out; where the driver shows GPUs that CuPy cannot use,
  test_environment.py fails with the fix.
"""
from __future__ import annotations

import os

from kosmos.environment import probe_gpus

PROBE = probe_gpus()
GPUS = PROBE.count

collect_ignore: list[str] = []
if os.environ.get("KOSMOS_MPI_TESTS") != "1":
    collect_ignore.append("mpi")
if GPUS == 0:  # no GPU, or one CuPy cannot use: then test_environment.py fails, naming the fix
    collect_ignore.append("gpu")


def pytest_report_header(config):  # noqa: ANN001
    parts = [f"kosmos: {GPUS} GPU(s) usable"]
    if PROBE.problem:
        parts.append(f"tests/gpu not collected: GPUs here are UNUSABLE: {PROBE.problem}")
    elif GPUS == 0:
        parts.append(f"tests/gpu not collected (no GPU: {PROBE.reason})")
    if "mpi" in collect_ignore:
        parts.append("tests/mpi runs under mpiexec from tests/test_mpi.py")
    return "; ".join(parts)
