"""Compile every kernel in hipsrc/ without a GPU: NVIDIA through NVRTC, AMD through clang.

    python -m kosmos.runtime.check --nvidia sm_90a --nvidia sm_80 --amd gfx942 --amd gfx950

Used by CI so that a kernel that does not compile fails the build on a CPU-only machine.
Kernels are extern "C" entry points, so compiling a .hip file compiles all of its kernels.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .source import compile_options, hipsrc_dir, kernel_files


NVRTC_FIX = "pip install 'kosmos[cuda13]' (or 'kosmos[cuda12]'): CuPy with NVRTC and the CUDA headers"


def compile_nvidia(path: Path, arch: str) -> int:
    """NVRTC-compile one file to a cubin for `arch`; returns the cubin size.

    Every failure (a compile error, or NVRTC missing) is a RuntimeError naming the file and target."""
    try:
        import cupy  # noqa: F401 - loads the CUDA libraries CuPy finds in the pip wheels
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as e:  # noqa: BLE001 - no CuPy, or no libnvrtc
        raise RuntimeError(f"{path.name} ({arch}): NVRTC is not usable ({type(e).__name__}: {e}); "
                           f"{NVRTC_FIX}") from None
    # What cupy.RawModule adds to every NVRTC compile (cupy/cuda/compiler.py), so that this check
    # compiles what runs: unannotated functions are device functions, and fp32 denormals flush
    opts = list(compile_options("cuda", arch)) + ["--device-as-default-execution-space", "-ftz=true"]
    if arch == "sm_90a":
        opts.append("--ptxas-options=-v")  # for ptxas's wgmma performance warnings, below
    prog = nvrtc.createProgram(path.read_text(), path.name, [], [])
    try:
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError as e:
            log = nvrtc.getProgramLog(prog)
            raise RuntimeError(f"{path.name} ({arch}): {e}\n{log}") from None
        log = nvrtc.getProgramLog(prog)
        lost = serialized_wgmma(log)
        if lost:
            raise RuntimeError(f"{path.name} ({arch}): ptxas serializes the wgmma of " + "; ".join(lost))
        if arch == "sm_90a" and path.name in BUILDER_SMEM_FILES:
            over = {fn: n for fn, n in static_smem(log).items() if n + builder_smem_hopper() > SM90_BLOCK_SMEM}
            if over:
                raise RuntimeError(f"{path.name} ({arch}): static shared memory beside the builder's "
                                   f"{builder_smem_hopper()} B passes the {SM90_BLOCK_SMEM} B a block may have "
                                   "(the kernel would not launch): " + "; ".join(f"{fn} {n} B" for fn, n in over.items()))
        spilled = {fn: n for fn, n in spill_stores(log).items() if n > 0}
        if path.name in NO_SPILL_FILES and spilled:
            raise RuntimeError(f"{path.name} ({arch}): ptxas spills in the builder's own kernels: " +
                               "; ".join(f"{fn} {n} B" for fn, n in spilled.items()))
        return len(nvrtc.getCUBIN(prog))
    finally:
        nvrtc.destroyProgram(prog)


def log_lines(log: str | bytes) -> list[str]:
    """An NVRTC program log as lines (NVRTC returns bytes with a trailing NUL)."""
    if isinstance(log, bytes):
        log = log.decode(errors="replace")
    return log.replace("\0", "").splitlines()


def serialized_wgmma(log: str | bytes) -> list[str]:
    """ptxas's "wgmma.mma_async instructions are serialized" warnings (C75xx) in a compile log, one
    per function: each costs a Hopper GEMM 5-15 % (measured: accumulators written in a divergent
    path, or too few registers), while the kernel still compiles and passes every test."""
    out = []
    for line in log_lines(log):
        if "wgmma.mma_async instructions are serialized" in line:
            tail = line.split("serialized", 1)[1]
            cut = " in the function '" if " in the function '" in tail else " for the function '"
            why, _, rest = tail.partition(cut)
            why, fn = why.strip(), (rest.split("'")[0] if rest else "?")
            entry = f"{fn} ({why})"
            if entry not in out:
                out.append(entry)
    return out


# The standalone GEMM kernels are the builder alone, and spill nothing on sm_90a: a spill there is
# a register-allocation regression of the tile library (the fused kernels' movers may spill).
NO_SPILL_FILES = ("gemm.hip", "grouped.hip")


# The files whose kernels launch with the builder's dynamic shared memory (gemm.shared_mem_bytes()).
BUILDER_SMEM_FILES = ("gemm.hip", "grouped.hip", "tp.hip", "moe_fused_forward.hip",
                      "moe_fused_backward_f32.hip", "moe_fused_backward_bf16.hip")
# Shared memory a block may opt in to on sm_90 (227 KiB). The Hopper builder's plan leaves ~1.7 KiB
# of it for a kernel's static variables (group tables, MoE tallies): a second group-table prefix
# (+514 B, session 31's first cluster patch) would have made every grouped and MoE kernel fail to launch.
SM90_BLOCK_SMEM = 232448


def builder_smem_hopper() -> int:
    from ..gemm import DEVICE_CONSTANTS

    return DEVICE_CONSTANTS["kSmemBytesHopper"]


def static_smem(log: str | bytes) -> dict[str, int]:
    """Bytes of static shared memory per entry function in a `ptxas -v` log."""
    out: dict[str, int] = {}
    fn = None
    for line in log_lines(log):
        if "Compiling entry function '" in line:
            fn = line.split("'")[1]
        elif fn is not None and "bytes smem" in line:
            out[fn] = int(line.split("bytes smem")[0].split(",")[-1].split()[-1])
    return out


def spill_stores(log: str | bytes) -> dict[str, int]:
    """Bytes of spill stores per function in a `ptxas -v` log."""
    out: dict[str, int] = {}
    fn = None
    for line in log_lines(log):
        if "Function properties for " in line:
            fn = line.split("Function properties for ", 1)[1].strip()
        elif fn is not None and "bytes spill stores" in line:
            out[fn] = int(line.split("bytes spill stores")[0].split(",")[-1].split()[-1])
    return out


# gfx950 (MI350X/MI355X) needs LLVM 20 or newer; Debian bookworm's security archive has clang-22.
CLANGS = ("clang++-22", "clang++-21", "clang++-20", "clang++-19", "clang++")


def find_clang() -> str | None:
    for name in (os.environ.get("KOSMOS_HIP_CLANG", ""), *CLANGS):
        if name and shutil.which(name):
            return name
    return None


def compile_amd(path: Path, arch: str, clang: str, keep: Path | None = None) -> int:
    """clang -x hip device-only compile of one file to AMD assembly; returns the assembly size.

    `keep`: a directory to leave <stem>.<arch>.s in (to read the memory-model instructions).
    """
    opts = [o for o in compile_options("hip") if o != "-std=c++17"]
    with tempfile.TemporaryDirectory() as tmp:
        out = (Path(keep) if keep is not None else Path(tmp)) / f"{path.stem}.{arch}.s"
        # CDNA runs 64-wide waves; clang 22 no longer predefines the macro the ROCm 5.2 headers read.
        cmd = [clang, "-x", "hip", "-std=c++17", f"--offload-arch={arch}", "-nogpulib", "--hip-path=/usr",
               "--cuda-device-only", "-O3", "-S", "-D__AMDGCN_WAVEFRONT_SIZE=64", *opts, str(path), "-o", str(out)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{path.name} ({arch}): {' '.join(cmd)}\n{r.stderr}")
        return out.stat().st_size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nvidia", action="append", default=[], metavar="ARCH", help="e.g. sm_90a (repeatable)")
    ap.add_argument("--amd", action="append", default=[], metavar="ARCH", help="e.g. gfx942 (repeatable)")
    args = ap.parse_args(argv)
    if not args.nvidia and not args.amd:
        ap.error("name at least one --nvidia or --amd target")
    files = kernel_files()
    if not files:
        print(f"no kernels found under {hipsrc_dir()}", file=sys.stderr)
        return 1
    clang = find_clang() if args.amd else None
    if args.amd and clang is None:
        print("no clang++ found for the AMD compile check: apt-get install clang-22 hipcc "
              "(clang 20 or newer for gfx950)", file=sys.stderr)
        return 1
    failures = 0
    for f in files:
        for arch in args.nvidia:
            try:
                print(f"ok   {f.name:28s} {arch:8s} cubin {compile_nvidia(f, arch):>9d} B", flush=True)
            except RuntimeError as e:
                failures += 1
                print(f"FAIL {e}", flush=True)
        for arch in args.amd:
            try:
                print(f"ok   {f.name:28s} {arch:8s} asm   {compile_amd(f, arch, clang):>9d} B", flush=True)
            except RuntimeError as e:
                failures += 1
                print(f"FAIL {e}", flush=True)
    print(f"{len(files)} kernel files, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
