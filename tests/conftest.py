"""Top-level test configuration: what `python -m pytest tests` collects.

- tests/mpi/ runs only under mpiexec: tests/test_mpi.py spawns `mpiexec -n 4 python -m pytest tests/mpi`
  with KOSMOS_MPI_TESTS=1, the only way it is collected.
- tests/gpu/ is collected only when a GPU is visible (run it under mpirun: see README); on a CPU
  machine it is left out, not errored.
"""
from __future__ import annotations

import os


def _gpu_count() -> int:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no CuPy, no driver, no device
        return 0


GPUS = _gpu_count()

collect_ignore: list[str] = []
if os.environ.get("KOSMOS_MPI_TESTS") != "1":
    collect_ignore.append("mpi")
if GPUS == 0:
    collect_ignore.append("gpu")


def pytest_report_header(config):  # noqa: ANN001
    parts = [f"kosmos: {GPUS} GPU(s) visible"]
    if GPUS == 0:
        parts.append("tests/gpu not collected (no GPU)")
    if "mpi" in collect_ignore:
        parts.append("tests/mpi runs under mpiexec from tests/test_mpi.py")
    return "; ".join(parts)
