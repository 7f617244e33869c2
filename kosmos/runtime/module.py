"""Compile hipsrc/*.hip through cupy.RawModule and hand out kernels.

Modules are cached per process (by file, options and name expressions) on top of CuPy's
on-disk cache. When several ranks share a node, node-local rank 0 compiles first and the
others wait for it, so no rank ever reads a half-written cache file; a compile that fails on
any rank raises on every rank.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Sequence

from ..errors import KosmosCompileError
from ..exchange import collectively
from .source import compile_options, hipsrc_dir, nvidia_arch

if TYPE_CHECKING:
    import cupy
    from ..world import World

_cache: dict[tuple, "cupy.RawModule"] = {}
_lock = threading.Lock()


def current_target() -> tuple[str, str | None]:
    """(backend, arch) of the current device: ("cuda", "sm_90a") or ("hip", None)."""
    import cupy

    if cupy.cuda.runtime.is_hip:
        return "hip", None
    cc = cupy.cuda.Device().compute_capability  # e.g. "90"
    return "cuda", nvidia_arch(int(cc[:-1]), int(cc[-1]))


def load_module(
    filename: str,
    name_expressions: Sequence[str] = (),
    world: "World | None" = None,
    extra_options: Sequence[str] = (),
) -> "cupy.RawModule":
    """Compile (or fetch from cache) hipsrc/<filename> with the current device's options. With a
    `world` of more than one rank the first call for a module is collective (node-local rank 0
    compiles, the others load from CuPy's disk cache): make it on every rank of the world, in the
    same order, whether or not a rank will launch the kernel (a rank without tokens too)."""
    import cupy

    backend, arch = current_target()
    options = compile_options(backend, arch) + tuple(extra_options)
    key = (filename, options, tuple(name_expressions), cupy.cuda.Device().id)
    with _lock:
        mod = _cache.get(key)
    if mod is not None:
        return mod

    def build() -> "cupy.RawModule":
        src = (hipsrc_dir() / filename).read_text()
        m = cupy.RawModule(
            code=src, options=options, name_expressions=list(name_expressions) or None
        )
        try:
            m.compile()
        except Exception as e:  # CuPy raises its own CompileException with the log
            raise KosmosCompileError(f"compiling hipsrc/{filename} with {options} failed:\n{e}") from e
        return m

    if world is not None and world.size > 1:
        # Node-local rank 0 fills CuPy's disk cache; the others then hit it. A failure on any rank
        # raises on every rank (a rank left waiting in a barrier would hang).
        first = world.local_rank == 0
        mod = collectively(world.local_comm, f"to compile hipsrc/{filename}", build if first else lambda: None)
        mod = collectively(world.comm, f"to load hipsrc/{filename}", (lambda: mod) if first else build)
    else:
        mod = build()
    with _lock:
        _cache[key] = mod
    return mod

