"""The GPU extras bring every runtime library kosmos loads: checked on a CPU (loading needs no GPU).

CI installs the `cuda13` extra (and the `cuda12` one in a second venv) and sets KOSMOS_REQUIRE_TOOLCHAINS=1,
so a library the extra no longer brings fails here instead of on a user's driver-only machine.
"""
from __future__ import annotations

import os

import pytest

from kosmos.runtime import check
from kosmos.runtime.source import hipsrc_dir

REQUIRED = os.environ.get("KOSMOS_REQUIRE_TOOLCHAINS") == "1"


@pytest.fixture(scope="module")
def cupy():  # noqa: ANN201
    try:
        import cupy as mod
    except ImportError as e:
        if REQUIRED:
            pytest.fail(f"CuPy is missing and KOSMOS_REQUIRE_TOOLCHAINS=1 ({e})")
        pytest.skip("CuPy is not installed")
    if mod.cuda.runtime.is_hip:
        pytest.skip("a ROCm CuPy: its libraries come with the system's ROCm, not from PyPI")
    return mod


def test_nvrtc_compiles_a_kernel(cupy) -> None:  # noqa: ANN001
    assert check.compile_nvidia(hipsrc_dir() / "timing.hip", "sm_90a") > 0


def test_cublas_curand_nccl_load(cupy) -> None:  # noqa: ANN001
    from cupy.cuda import nccl
    from cupy_backends.cuda.libs import cublas, curand

    assert cublas.getVersion(0) >= 120000  # cuBLAS 12 or 13: cupy.matmul, the GEMM baseline
    assert curand.getVersion() >= 10000    # cupy.random: test inputs and default weights
    assert nccl.available, "CuPy found no NCCL library (nvidia-nccl-cu13 / -cu12)"
    assert nccl.get_version() >= 22000
