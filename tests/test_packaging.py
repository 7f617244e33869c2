"""What a non-editable install ships: every kernel source under kosmos/_hipsrc, the YAML configs.

Runs setuptools' build_py (the step that lays out the installed package) on a copy of the
checkout, offline, and compares it with the source tree.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                              "bench", "tests")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("setuptools")
    tmp = tmp_path_factory.mktemp("pkg")
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=SKIP)
    out = tmp / "lib"
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(out)],
                       cwd=src, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return out / "kosmos"


def rel_files(root: Path, patterns: tuple[str, ...]) -> set[str]:
    return {str(p.relative_to(root)) for pat in patterns for p in root.rglob(pat) if p.is_file()}


def test_every_kernel_source_ships(built: Path) -> None:
    want = rel_files(REPO / "hipsrc", ("*.hip", "*.h", "*.cuh"))
    got = rel_files(built / "_hipsrc", ("*",))
    assert "kosmos/platform.h" in want
    assert want <= got, f"missing from the package: {sorted(want - got)}"


def test_installed_copy_is_found(built: Path) -> None:
    code = ("from kosmos.runtime import hipsrc_dir, kernel_files; d = hipsrc_dir(); "
            "print(d); print(len(kernel_files()))")
    r = subprocess.run([sys.executable, "-c", code], cwd=built.parent, capture_output=True, text=True, timeout=120,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(built.parent)})
    assert r.returncode == 0, r.stderr
    where, count = r.stdout.split()
    assert Path(where) == built / "_hipsrc"
    assert int(count) == len(list((REPO / "hipsrc").glob("*.hip")))


def test_configs_ship(built: Path) -> None:
    want = rel_files(REPO / "kosmos" / "configs", ("*.yaml",))
    assert want <= rel_files(built / "configs", ("*.yaml",))


def test_python_modules_ship(built: Path) -> None:
    want = {str(p.relative_to(REPO / "kosmos")) for p in (REPO / "kosmos").rglob("*.py")}
    got = {str(p.relative_to(built)) for p in built.rglob("*.py")}
    assert want <= got, f"missing from the package: {sorted(want - got)}"
