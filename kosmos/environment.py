"""What this machine has for kosmos, and the one command that fixes each missing piece.

The GPU probe asks the driver itself (libcuda through ctypes, the AMD KFD topology in sysfs), not only
CuPy, so that "no GPU" means there is none: a GPU that CuPy cannot use (a CuPy built for a newer CUDA
than the driver, no CuPy at all) is a problem with a named fix, never a silent skip.
`python -m kosmos info` prints the whole report (`report()`).
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Callable

from .errors import KosmosError

# The extras of setup.cfg, by the CUDA major a driver supports.
CUDA_EXTRAS = {13: "cuda13", 12: "cuda12"}
MIN_DRIVER = {13: 580, 12: 525}  # NVIDIA driver branches that first supported each CUDA major


def install_hint(extra: str) -> str:
    return f"pip install 'kosmos[{extra}]'"


@dataclass(frozen=True)
class DriverInfo:
    """What the GPU driver reports, independent of CuPy."""

    vendor: str              # "nvidia", "amd" or ""
    gpus: int
    version: str | None      # NVIDIA: the CUDA version the driver supports ("13.0"); AMD: amdgpu's version
    cuda: int | None         # NVIDIA: that CUDA version as an integer (13000)
    why_none: str            # when gpus == 0: why


def nvidia_driver(load: Callable[[str], Any] = ctypes.CDLL) -> DriverInfo:
    try:
        lib = load("libcuda.so.1")
    except OSError:
        return DriverInfo("", 0, None, None, "no NVIDIA driver (libcuda.so.1 not found)")
    ver = ctypes.c_int(0)
    lib.cuDriverGetVersion(ctypes.byref(ver))
    cuda = int(ver.value) or None
    version = f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None
    rc = lib.cuInit(0)
    if rc != 0:
        why = "the NVIDIA driver sees no GPU" if rc == 100 else f"the NVIDIA driver's cuInit failed (CUresult {rc})"
        return DriverInfo("nvidia", 0, version, cuda, why)
    n = ctypes.c_int(0)
    lib.cuDeviceGetCount(ctypes.byref(n))
    return DriverInfo("nvidia", int(n.value), version, cuda, "" if n.value else "the NVIDIA driver sees no GPU")


def amd_driver(root: str = "/") -> DriverInfo:
    """GPUs in the KFD topology (nodes with SIMDs; CPU nodes have none)."""
    if not os.path.exists(os.path.join(root, "dev/kfd")):
        return DriverInfo("", 0, None, None, "no AMD GPU driver (/dev/kfd absent)")
    gpus = 0
    for props in glob.glob(os.path.join(root, "sys/class/kfd/kfd/topology/nodes/*/properties")):
        try:
            fields = dict(line.split(None, 1) for line in open(props).read().splitlines() if " " in line)
        except OSError:
            continue
        gpus += int(fields.get("simd_count", "0").strip() or 0) > 0
    try:
        version = open(os.path.join(root, "sys/module/amdgpu/version")).read().strip() or None
    except OSError:
        version = None
    return DriverInfo("amd", gpus, version, None, "" if gpus else "the AMD driver lists no GPU")


@dataclass(frozen=True)
class GpuProbe:
    count: int              # GPUs CuPy can use
    driver: DriverInfo
    problem: str | None     # GPUs exist but CuPy cannot use them: what is wrong and the fix
    reason: str             # count == 0 and no problem: why there is no GPU


def extra_for_driver(cuda: int | None) -> str | None:
    """The kosmos extra whose CuPy this NVIDIA driver runs (None: the driver is older than CUDA 12)."""
    if cuda is None:
        return None
    major = cuda // 1000
    return CUDA_EXTRAS.get(min(major, max(CUDA_EXTRAS))) if major >= min(CUDA_EXTRAS) else None


def explain_cupy_failure(error: BaseException, driver: DriverInfo, cupy_cuda: int | None, cupy_is_hip: bool) -> str:
    """Why CuPy cannot use the GPUs the driver has, with the fix."""
    real = f"{type(error).__name__}: {error}"
    if driver.vendor == "nvidia":
        if cupy_is_hip:
            return f"this CuPy is built for ROCm, but the GPUs are NVIDIA ({real}): {install_hint('cuda13')}"
        extra = extra_for_driver(driver.cuda)
        if cupy_cuda and driver.cuda and cupy_cuda // 1000 > driver.cuda // 1000:
            built = f"{cupy_cuda // 1000}.{cupy_cuda % 1000 // 10}"
            fix = (f"install kosmos[{extra}] (pip uninstall -y cupy-cuda{cupy_cuda // 1000}x && {install_hint(extra)})"
                   if extra else "update the NVIDIA driver (kosmos needs CUDA 12 or newer)")
            return f"this CuPy is built for CUDA {built}; the driver supports {driver.version}: {fix} ({real})"
        return f"CuPy cannot use the NVIDIA GPU ({real}); reinstalling for this driver may fix it: {install_hint(extra or 'cuda13')}"
    if driver.vendor == "amd" and not cupy_is_hip:
        return f"this CuPy is built for CUDA, but the GPUs are AMD ({real}): {install_hint('rocm')} (needs ROCm 7.0)"
    return f"CuPy cannot use the GPU ({real})"


def _cupy_build() -> tuple[int | None, bool]:
    import cupy

    try:
        return int(cupy.cuda.runtime.runtimeGetVersion()), bool(cupy.cuda.runtime.is_hip)
    except Exception:  # the runtime library itself failed to load
        return None, bool(getattr(cupy.cuda.runtime, "is_hip", False))


def probe_gpus_with(drivers: list[DriverInfo], import_cupy: Callable[[], Any],
                    cupy_build: Callable[[], tuple[int | None, bool]]) -> GpuProbe:
    """The probe's logic, with the machine passed in (tests give fakes)."""
    found = [d for d in drivers if d.gpus > 0]
    driver = found[0] if found else (next((d for d in drivers if d.vendor), None) or drivers[0])
    why_none = "; ".join(d.why_none for d in drivers)
    try:
        cupy = import_cupy()
    except ImportError as e:
        if not found:
            return GpuProbe(0, driver, None, f"{why_none}; CuPy is not installed either")
        extra = (extra_for_driver(driver.cuda) or "cuda13") if driver.vendor == "nvidia" else "rocm"
        return GpuProbe(0, driver, f"CuPy is not installed ({e}); for this {driver.vendor.upper()} GPU: "
                                   f"{install_hint(extra)}", "")
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as e:  # noqa: BLE001 - any CuPy failure is reported with its real text
        if not found:
            return GpuProbe(0, driver, None, why_none)
        return GpuProbe(0, driver, explain_cupy_failure(e, driver, *cupy_build()), "")
    if count == 0:
        return GpuProbe(0, driver, None, why_none or "CuPy sees no GPU")
    return GpuProbe(count, driver, None, "")


def _import_cupy() -> Any:
    import cupy

    return cupy


@functools.lru_cache(maxsize=1)
def probe_gpus() -> GpuProbe:
    """This machine's GPU probe (cached for the process)."""
    return probe_gpus_with([nvidia_driver(), amd_driver()], _import_cupy, _cupy_build)


def usable_gpus() -> int:
    """GPUs CuPy can use: 0 where the machine has none; KosmosError, naming the fix, where it has GPUs
    that CuPy cannot use."""
    p = probe_gpus()
    if p.problem:
        raise KosmosError(p.problem)
    return p.count


def _load_mpi() -> Any:
    from mpi4py import MPI

    return MPI


def import_mpi(load: Callable[[], Any] = _load_mpi) -> Any:
    """mpi4py's MPI module, or a KosmosError that names the fix."""
    try:
        MPI = load()
    except ImportError as e:
        if "mpi4py" in str(e):
            raise KosmosError(f"mpi4py is not installed: {install_hint('mpi')} (it brings Open MPI too)") from e
        raise KosmosError(f"mpi4py cannot load an MPI library ({e}): {install_hint('mpi')}") from e
    except RuntimeError as e:  # mpi4py's "cannot load MPI library"
        first = str(e).splitlines()[0] if str(e) else "cannot load MPI library"
        raise KosmosError(f"mpi4py {first} (libmpi.so.40 for Open MPI, libmpi.so.12 for MPICH): "
                          f"{install_hint('mpi')} brings Open MPI from PyPI, or install your system's MPI") from e
    return MPI


def import_cupy() -> Any:
    """CuPy, or a KosmosError that names the extra to install."""
    try:
        import cupy
    except ImportError as e:
        raise KosmosError(f"CuPy is not installed ({e}): {install_hint('cuda13')} for CUDA 13 drivers, "
                          f"{install_hint('cuda12')} for CUDA 12, {install_hint('rocm')} for ROCm 7.0") from e
    return cupy


# ---- the report ----
@dataclass
class Item:
    what: str
    value: str
    fix: str | None = None  # None: fine


def _try(fn: Callable[[], str], fix: str | None) -> tuple[str, str | None]:
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - the report shows every failure as it is
        return f"missing ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})", fix


def _version_line(cmd: list[str]) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[0] if lines else "?"


def report() -> list[Item]:
    """Every piece kosmos uses, found or not (with its fix)."""
    from . import __version__
    from .runtime.check import find_clang
    from .runtime.source import hipsrc_dir, tree_digest

    items = [Item("kosmos", f"{__version__}, kernels {hipsrc_dir()} (digest {tree_digest()})"),
             Item("python", f"{platform.python_version()} ({sys.executable})")]
    probe = probe_gpus()
    d = probe.driver
    drv = f"{d.vendor} {d.version}" + (" (CUDA)" if d.vendor == "nvidia" else "") if d.vendor else "none"
    items.append(Item("driver", f"{drv}, {d.gpus} GPU(s)" if d.vendor else f"none ({d.why_none})"))
    try:
        cupy = _import_cupy()
    except ImportError:
        items.append(Item("cupy", "missing", install_hint(extra_for_driver(d.cuda) or "cuda13")))
        cupy = None
    extra = "rocm" if cupy is not None and cupy.cuda.runtime.is_hip else (extra_for_driver(d.cuda) or "cuda13")
    if cupy is not None:
        built, hip = _cupy_build()
        runtime = "ROCm" if hip else "CUDA"
        ver = f"{built // 1000}.{built % 1000 // 10}" if built and not hip else str(built)
        items.append(Item("cupy", f"{cupy.__version__}, built for {runtime} {ver}"))
    if probe.problem:
        items.append(Item("gpus", "unusable", probe.problem))
    elif probe.count == 0:
        items.append(Item("gpus", f"none ({probe.reason})"))
    else:
        for i in range(probe.count):
            p = cupy.cuda.runtime.getDeviceProperties(i)
            name = p["name"].decode() if isinstance(p["name"], bytes) else p["name"]
            arch = p.get("gcnArchName", b"")
            arch = (arch.decode() if isinstance(arch, bytes) else arch) or f"sm_{p['major']}{p['minor']}"
            items.append(Item(f"gpu {i}", f"{name}, {arch}, {p['multiProcessorCount']} SMs/CUs, "
                                          f"{p['totalGlobalMem'] / 2**30:.0f} GiB"))
    if cupy is not None:
        libs = _library_items(cupy, install_hint(extra))
        items += libs
        cache = os.environ.get("CUPY_CACHE_DIR") or getattr(cupy.cuda.compiler, "_default_cache_dir",
                                                             os.path.expanduser("~/.cupy/kernel_cache"))
        items.append(Item("compile cache", cache))
    try:
        mpi = import_mpi_uninitialized()
        library = mpi.Get_library_version().splitlines()[0].split(",")[0].strip()
        items.append(Item("mpi4py", f"{_mpi4py_version()}, {library} (MPI {'.'.join(map(str, mpi.Get_version()))})"))
    except KosmosError as e:
        items.append(Item("mpi4py", "unusable", str(e)))
    from .launcher import find_mpiexec

    mpiexec = find_mpiexec()
    items.append(Item("mpiexec", f"{mpiexec} ({_version_line([mpiexec, '--version'])})" if mpiexec else "missing",
                      None if mpiexec else install_hint("mpi")))
    clang = find_clang()
    items.append(Item("clang (AMD check)", f"{shutil.which(clang)} ({_version_line([clang, '--version'])})" if clang
                      else "missing (only for compiling the AMD kernels without a GPU)",
                      None if clang else "apt-get install clang-22 hipcc"))
    return items


def _load_mpi_uninitialized() -> Any:
    import mpi4py

    mpi4py.rc.initialize = False
    mpi4py.rc.finalize = False
    return _load_mpi()


def import_mpi_uninitialized() -> Any:
    """MPI without MPI_Init (the report only reads versions); KosmosError naming the fix otherwise."""
    return import_mpi(_load_mpi_uninitialized)


def _mpi4py_version() -> str:
    import mpi4py

    return mpi4py.__version__


def _library_items(cupy: Any, fix: str) -> list[Item]:
    """NVRTC/hipRTC, BLAS, RAND and NCCL/RCCL, loaded through CuPy (no GPU needed)."""
    hip = cupy.cuda.runtime.is_hip

    def nvrtc() -> str:
        from cupy_backends.cuda.libs import nvrtc as m

        return ".".join(map(str, m.getVersion()))

    def blas() -> str:
        from cupy_backends.cuda.libs import cublas as m

        v = m.getVersion(0)  # major*10000 + minor*100 + patch
        return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"

    def rand() -> str:
        from cupy_backends.cuda.libs import curand as m

        v = m.getVersion()  # major*1000 + minor*100 + patch
        return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"

    def nccl() -> str:
        from cupy.cuda import nccl as m

        if not m.available:
            raise RuntimeError("CuPy found no NCCL library")
        v = m.get_version()
        return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"

    names = (("hipRTC", "hipBLAS", "hipRAND", "RCCL") if hip else ("NVRTC", "cuBLAS", "cuRAND", "NCCL"))
    files = (("libhiprtc.so", "libhipblas.so", "libhiprand.so", "librccl.so") if hip else
             ("libnvrtc.so", "libcublas.so", "libcurand.so", "libnccl.so"))
    items = []
    for name, fn, file in zip(names, (nvrtc, blas, rand, nccl), files):
        value, broken = _try(fn, fix)
        where = None if broken else loaded_from(file)
        items.append(Item(name, f"{value} ({where})" if where else value, broken))
    return items


def loaded_from(soname: str) -> str | None:
    """The file a shared library was loaded from in this process (Linux: /proc/self/maps)."""
    try:
        maps = open("/proc/self/maps").read().splitlines()
    except OSError:
        return None
    for line in maps:
        path = line.split(None, 5)[-1] if len(line.split(None, 5)) == 6 else ""
        if os.path.basename(path).startswith(soname):
            return path
    return None


def format_report(items: list[Item]) -> str:
    width = max(len(i.what) for i in items) + 2
    lines = []
    for i in items:
        lines.append(f"{i.what:<{width}}{i.value}")
        if i.fix:
            lines.append(f"{'':<{width}}fix: {i.fix}")
    missing = sum(1 for i in items if i.fix)
    lines.append(f"\n{missing} piece(s) missing or unusable" if missing else "\neverything kosmos uses is here")
    return "\n".join(lines)
