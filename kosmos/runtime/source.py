"""Where kernel sources live, and the compile options for the GPU at hand.

CuPy's on-disk cache keys on the source string and options, not on headers reached through
``-I``; we pass a digest of the whole hipsrc/ tree as a define so that editing a header
recompiles every kernel that might include it.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
from pathlib import Path
from typing import Iterator


def hipsrc_dir() -> Path:
    """The kernel source tree: $KOSMOS_HIPSRC, the source checkout, or the installed copy."""
    return _find_hipsrc(os.environ.get("KOSMOS_HIPSRC"), __file__)


# Looked up once per ($KOSMOS_HIPSRC, this file's place): every kernel launch's load_module asks,
# and the lookup's path resolution and stat calls cost ~30 us a time on the host.
@functools.lru_cache(maxsize=None)
def _find_hipsrc(env: str | None, this_file: str) -> Path:
    candidates = [Path(env)] if env else []
    here = Path(this_file).resolve()
    candidates += [here.parents[2] / "hipsrc", here.parents[1] / "_hipsrc"]
    for c in candidates:
        if (c / "kosmos" / "platform.h").is_file():
            return c
    raise FileNotFoundError(f"kernel sources not found; looked in {[str(c) for c in candidates]}")


@contextlib.contextmanager
def kernel_tree(path: str | os.PathLike) -> Iterator[Path]:
    """Kernels loaded inside the block come from the hipsrc tree at `path`, as $KOSMOS_HIPSRC would
    make them (the compile options name the tree and its digest, so modules of two trees never
    share a cache entry); objects keep the kernels they loaded. For an A/B of a kernel change in
    one process, its calls interleaved with this tree's (bench/moe.py --tree-b); the Python side
    is this tree's, so the other tree must agree with it on every record and launch shape."""
    root = Path(path).resolve()
    if not (root / "kosmos" / "platform.h").is_file():
        raise FileNotFoundError(f"{root} is not a hipsrc tree (no kosmos/platform.h)")
    before = os.environ.get("KOSMOS_HIPSRC")
    os.environ["KOSMOS_HIPSRC"] = str(root)
    try:
        yield root
    finally:
        if before is None:
            del os.environ["KOSMOS_HIPSRC"]
        else:
            os.environ["KOSMOS_HIPSRC"] = before


def in_kernel_tree(path: str | os.PathLike, fn):
    """fn, each call of it inside kernel_tree(path): a benchmark's "B" contender of an A/B (kernels
    that fn loads lazily come from that tree too)."""
    def run(*args, **kwargs):
        with kernel_tree(path):
            return fn(*args, **kwargs)
    return run


def kernel_files() -> list[Path]:
    """Every kernel family (one .hip file each)."""
    return sorted(hipsrc_dir().glob("*.hip"))


@functools.lru_cache(maxsize=None)
def tree_digest(root: str | None = None) -> str:
    """A short digest of every file under hipsrc/ (names and contents)."""
    base = Path(root) if root else hipsrc_dir()
    h = hashlib.sha256()
    for p in sorted(base.rglob("*")):
        if p.is_file() and p.suffix in (".h", ".hip", ".cuh"):
            h.update(str(p.relative_to(base)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def nvidia_arch(major: int, minor: int) -> str:
    """The -arch for an NVIDIA compute capability; Hopper gets the arch-specific 'a' target (wgmma)."""
    suffix = "a" if (major, minor) == (9, 0) else ""
    return f"sm_{major}{minor}{suffix}"


def compile_options(backend: str, arch: str | None = None) -> tuple[str, ...]:
    """Options for cupy.RawModule (NVRTC or hipRTC).

    backend: "cuda" or "hip". arch: e.g. "sm_90a" (CUDA); ignored on hip, where hipRTC
    targets the current device.
    """
    root = hipsrc_dir()
    opts = ["-std=c++17", f"-I{root}", f"-DKOSMOS_SRC_DIGEST=0x{tree_digest(str(root))}"]
    if backend == "cuda":
        if arch:
            opts.append(f"-arch={arch}")
    elif backend != "hip":
        raise ValueError(f"unknown backend {backend!r}; expected 'cuda' or 'hip'")
    return tuple(opts)
