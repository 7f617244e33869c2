"""Building device headers' pure logic for the host (the harnesses in tests/host/, with its shim)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kosmos.runtime.source import hipsrc_dir

HERE = Path(__file__).resolve().parent / "host"


def host_compiler() -> str:
    """A host C++ compiler; skips (or fails, with KOSMOS_REQUIRE_TOOLCHAINS=1) without one."""
    cxx = next((c for c in ("c++", "g++", "clang++", "clang++-22") if shutil.which(c)), None)
    if cxx is None:
        if os.environ.get("KOSMOS_REQUIRE_TOOLCHAINS") == "1":
            pytest.fail("no host C++ compiler and KOSMOS_REQUIRE_TOOLCHAINS=1")
        pytest.skip("no host C++ compiler")
    return cxx


def build(main_cpp: str, exe: Path, threads: bool = False, defines: tuple[str, ...] = ()) -> Path:
    """Compile tests/host/<main_cpp> against hipsrc/ with the shim into `exe` (threads: it runs a
    warp's lanes as threads; defines: NAME=VALUE each, as the kernels' -D)."""
    subprocess.run([host_compiler(), "-O2", "-std=c++17", *(["-pthread"] if threads else []),
                    *(f"-D{d}" for d in defines), "-include",
                    str(HERE / "shim.h"), f"-I{hipsrc_dir()}", str(HERE / main_cpp), "-o", str(exe)],
                   check=True, capture_output=True)
    return exe
