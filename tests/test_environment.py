"""The environment probe and `python -m kosmos info`: 'no GPU' only when there is none, and every
missing piece named with its fix. The machine is faked where the logic is tested."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kosmos import environment as env
from kosmos.environment import DriverInfo, GpuProbe

NO_NVIDIA = DriverInfo("", 0, None, None, "no NVIDIA driver (libcuda.so.1 not found)")
NO_AMD = DriverInfo("", 0, None, None, "no AMD GPU driver (/dev/kfd absent)")
NVIDIA_12_4 = DriverInfo("nvidia", 2, "12.4", 12040, "")
NVIDIA_13_0 = DriverInfo("nvidia", 1, "13.0", 13000, "")


class FakeRuntime:
    def __init__(self, count: int | Exception):
        self.count = count
        self.is_hip = False

    def getDeviceCount(self) -> int:  # noqa: N802 - CuPy's name
        if isinstance(self.count, Exception):
            raise self.count
        return self.count


class FakeCupy:
    def __init__(self, count: int | Exception):
        self.cuda = type("cuda", (), {"runtime": FakeRuntime(count)})()


def no_cupy() -> None:
    raise ImportError("No module named 'cupy'")


def test_this_machine_has_no_unusable_gpu() -> None:
    """Where the driver shows GPUs but CuPy cannot use them, the test run fails here, with the fix."""
    p = env.probe_gpus()
    assert p.problem is None, p.problem
    assert p.count > 0 or p.reason


def test_no_driver_is_no_gpu_whatever_cupy_says() -> None:
    insufficient = RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")
    p = env.probe_gpus_with([NO_NVIDIA, NO_AMD], lambda: FakeCupy(insufficient), lambda: (13000, False))
    assert (p.count, p.problem) == (0, None)
    assert "libcuda.so.1 not found" in p.reason and "/dev/kfd absent" in p.reason


def test_cupy_too_new_for_the_driver_names_the_extra() -> None:
    e = RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version")
    p = env.probe_gpus_with([NVIDIA_12_4, NO_AMD], lambda: FakeCupy(e), lambda: (13000, False))
    assert p.count == 0
    assert "this CuPy is built for CUDA 13.0; the driver supports 12.4: install kosmos[cuda12]" in p.problem
    assert "pip uninstall -y cupy-cuda13x && pip install 'kosmos[cuda12]'" in p.problem
    assert "cudaErrorInsufficientDriver" in p.problem  # CuPy's real error is kept


def test_missing_cupy_with_a_gpu_is_a_problem() -> None:
    p = env.probe_gpus_with([NVIDIA_13_0, NO_AMD], no_cupy, lambda: (None, False))
    assert "CuPy is not installed" in p.problem and "pip install 'kosmos[cuda13]'" in p.problem
    amd = DriverInfo("amd", 8, "6.10", None, "")
    p = env.probe_gpus_with([NO_NVIDIA, amd], no_cupy, lambda: (None, False))
    assert "pip install 'kosmos[rocm]'" in p.problem
    p = env.probe_gpus_with([NO_NVIDIA, NO_AMD], no_cupy, lambda: (None, False))
    assert p.problem is None and "CuPy is not installed either" in p.reason


def test_wrong_platform_builds() -> None:
    e = RuntimeError("hipErrorNoDevice")
    assert "built for ROCm, but the GPUs are NVIDIA" in env.explain_cupy_failure(e, NVIDIA_13_0, 60000, True)
    amd = DriverInfo("amd", 8, "6.10", None, "")
    assert "kosmos[rocm]" in env.explain_cupy_failure(e, amd, 13000, False)


def test_working_gpus() -> None:
    p = env.probe_gpus_with([NVIDIA_13_0, NO_AMD], lambda: FakeCupy(1), lambda: (13000, False))
    assert p == GpuProbe(1, NVIDIA_13_0, None, "")


def test_extra_for_driver() -> None:
    assert env.extra_for_driver(13000) == "cuda13"
    assert env.extra_for_driver(14010) == "cuda13"  # newer drivers run older CUDA
    assert env.extra_for_driver(12020) == "cuda12"
    assert env.extra_for_driver(11080) is None
    assert env.extra_for_driver(None) is None


class FakeLibcuda:
    def __init__(self, version: int, init_rc: int, count: int):
        self.version, self.init_rc, self.count = version, init_rc, count

    def cuDriverGetVersion(self, ref) -> int:  # noqa: ANN001, N802
        ctypes.cast(ref, ctypes.POINTER(ctypes.c_int))[0] = self.version
        return 0

    def cuInit(self, flags: int) -> int:  # noqa: N802
        return self.init_rc

    def cuDeviceGetCount(self, ref) -> int:  # noqa: ANN001, N802
        ctypes.cast(ref, ctypes.POINTER(ctypes.c_int))[0] = self.count
        return 0


def test_nvidia_driver_through_libcuda() -> None:
    d = env.nvidia_driver(lambda name: FakeLibcuda(12040, 0, 4))
    assert (d.vendor, d.gpus, d.version, d.cuda) == ("nvidia", 4, "12.4", 12040)
    d = env.nvidia_driver(lambda name: FakeLibcuda(13000, 100, 0))  # CUDA_ERROR_NO_DEVICE
    assert d.gpus == 0 and d.why_none == "the NVIDIA driver sees no GPU"

    def missing(name: str) -> None:
        raise OSError(f"{name}: cannot open shared object file")

    assert env.nvidia_driver(missing).why_none == "no NVIDIA driver (libcuda.so.1 not found)"


def test_amd_driver_from_the_kfd_topology(tmp_path: Path) -> None:
    assert env.amd_driver(str(tmp_path)).why_none == "no AMD GPU driver (/dev/kfd absent)"
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "kfd").write_text("")
    nodes = tmp_path / "sys/class/kfd/kfd/topology/nodes"
    for i, simds in enumerate([0, 304, 304]):  # node 0 is the CPU
        (nodes / str(i)).mkdir(parents=True)
        (nodes / str(i) / "properties").write_text(f"cpu_cores_count 0\nsimd_count {simds}\n")
    (tmp_path / "sys/module/amdgpu").mkdir(parents=True)
    (tmp_path / "sys/module/amdgpu/version").write_text("6.10.5\n")
    d = env.amd_driver(str(tmp_path))
    assert (d.vendor, d.gpus, d.version) == ("amd", 2, "6.10.5")


def test_missing_mpi_library_names_the_extra() -> None:
    def no_libmpi() -> None:  # what mpi4py raises without libmpi
        raise RuntimeError("cannot load MPI library\n/x/libmpi.so.40: cannot open shared object file")

    with pytest.raises(env.KosmosError, match=r"mpi4py cannot load MPI library .*pip install 'kosmos\[mpi\]'"):
        env.import_mpi(no_libmpi)

    def no_mpi4py() -> None:
        raise ImportError("No module named 'mpi4py'")

    with pytest.raises(env.KosmosError, match=r"mpi4py is not installed: pip install 'kosmos\[mpi\]'"):
        env.import_mpi(no_mpi4py)


def test_missing_cupy_names_the_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # `import cupy` now raises ImportError
    with pytest.raises(env.KosmosError, match=r"CuPy is not installed .*kosmos\[cuda13\].*kosmos\[cuda12\].*kosmos\[rocm\]"):
        env.import_cupy()


def test_info_runs_and_exits_0_here() -> None:
    r = subprocess.run([sys.executable, "-m", "kosmos", "info"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert r.returncode == 0, r.stderr
    for what in ("kosmos ", "python ", "driver ", "gpus", "mpi4py ", "mpiexec ", "clang (AMD check)"):
        assert what in r.stdout, r.stdout
    missing = [line for line in r.stdout.splitlines() if line.strip().startswith("fix:")]
    assert all("pip install" in f or "apt-get install" in f for f in missing), r.stdout


def test_format_report_shows_each_fix() -> None:
    text = env.format_report([env.Item("cuBLAS", "missing (OSError: libcublas.so.13)", "pip install 'kosmos[cuda13]'"),
                              env.Item("python", "3.12")])
    assert "cuBLAS  missing" in text and "fix: pip install 'kosmos[cuda13]'" in text
    assert "1 piece(s) missing or unusable" in text
