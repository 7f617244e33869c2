"""Device compiles without a GPU: the C structs the host mirrors, and the AMD memory model in the assembly.

NVIDIA needs CuPy's NVRTC (the [cuda13] extra); AMD needs clang++ 20 or newer with HIP headers
(`apt-get install hipcc clang-22`). Without them these tests skip, unless
KOSMOS_REQUIRE_TOOLCHAINS=1 (set by .ci/run), where a missing toolchain fails.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import numpy as np

from kosmos.runtime import check, mirror
from kosmos.runtime.source import compile_options, hipsrc_dir

REQUIRED = os.environ.get("KOSMOS_REQUIRE_TOOLCHAINS") == "1"

def layout_check() -> str:
    """Every host mirror's static_asserts (kosmos.runtime.mirror), and a kernel taking WaitCtx."""
    return mirror.check_source() + (
        'using namespace kosmos;\n'
        'extern "C" __global__ void layout_probe(WaitCtx w) { if (failed(w)) record_timeout(w, SITE_PROBE); }\n')


def _missing(what: str) -> None:
    if REQUIRED:
        pytest.fail(f"{what} is missing and KOSMOS_REQUIRE_TOOLCHAINS=1")
    pytest.skip(f"{what} not available")


@pytest.fixture(scope="module")
def nvrtc():  # noqa: ANN201
    try:
        from cupy_backends.cuda.libs import nvrtc as mod

        mod.getVersion()
    except Exception as e:  # no CuPy, or no libnvrtc
        _missing(f"NVRTC ({type(e).__name__}: {e})")
    return mod


@pytest.fixture(scope="module")
def clang() -> str:
    found = check.find_clang()
    if found is None:
        _missing("clang++ for HIP")
    return found


def _nvrtc_log(nvrtc, source: str) -> str | None:  # noqa: ANN001
    """None if `source` compiles for sm_90a, else the compile log."""
    prog = nvrtc.createProgram(source, "layout.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, list(compile_options("cuda", "sm_90a")))
        except nvrtc.NVRTCError:
            return nvrtc.getProgramLog(prog)
        return None
    finally:
        nvrtc.destroyProgram(prog)


def test_host_mirrors_match_the_device_code_nvrtc(nvrtc) -> None:  # noqa: ANN001
    log = _nvrtc_log(nvrtc, layout_check())
    assert log is None, log


def test_a_drifted_mirror_fails_the_check(nvrtc) -> None:  # noqa: ANN001
    """The check can fail: two fields swapped, a field of another size, one of the same size but another
    kind, and a changed constant are each caught, by name."""
    from kosmos.tp.params import AG_PARAMS_DTYPE as ag

    def variant(order: list[str], retype: dict) -> np.dtype:
        return np.dtype([(n, retype.get(n, ag.fields[n][0])) for n in order], align=True)

    names = list(ag.names)
    i, j = names.index("m"), names.index("x")
    names[i], names[j] = names[j], names[i]
    cases = {
        "kosmos::tp::AgParams::m: offset": variant(names, {}),
        "kosmos::tp::AgParams::mover_threads: size": variant(list(ag.names), {"mover_threads": np.uint16}),
        "kosmos::tp::AgParams::n_mover_items: a floating-point type": variant(list(ag.names),
                                                                              {"n_mover_items": np.float32}),
        "kosmos::gemm::kTileM == 64": mirror.ConstantMirror("kosmos::gemm", {"kTileM": 64}),
    }
    for what, drifted in cases.items():
        lines = (mirror.constant_asserts(drifted) if isinstance(drifted, mirror.ConstantMirror)
                 else mirror.struct_asserts(mirror.StructMirror("kosmos::tp::AgParams", drifted)))
        log = _nvrtc_log(nvrtc, '#include "kosmos/tp_params.h"\n' + "\n".join(lines) + "\n")
        assert log is not None and what in log, (what, log)


def test_a_hopper_only_mirror_is_checked_by_the_sm_90a_compile(nvrtc) -> None:  # noqa: ANN001
    """SideCopy exists in the wgmma layer only, so its asserts sit under its guard (the AMD compiles
    of the mirror check skip them); the sm_90a compile does reach them: a drifted mirror fails there."""
    from kosmos import gemm

    side = next(s for s in mirror.mirrors()[1] if s.ctype == "kosmos::gemm::SideCopy")
    assert side.guard == "KOSMOS_GEMM_WGMMA" and side.dtype == gemm.SIDE_COPY_DTYPE
    drifted = np.dtype([(n, np.uint32 if n == "bytes" else gemm.SIDE_COPY_DTYPE.fields[n][0])
                        for n in gemm.SIDE_COPY_DTYPE.names], align=True)
    lines = mirror.struct_asserts(mirror.StructMirror(side.ctype, drifted, side.guard))
    log = _nvrtc_log(nvrtc, '#include "kosmos/gemm/tile.h"\n' + "\n".join(lines) + "\n")
    assert log is not None and "kosmos::gemm::SideCopy::bytes: size" in log, log


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])  # wgmma + TMA; the portable mma.sync path
def test_every_kernel_compiles_for_nvidia(nvrtc, arch: str) -> None:  # noqa: ANN001
    for f in check.kernel_files():
        assert check.compile_nvidia(f, arch) > 0, f.name


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_host_mirrors_match_the_device_code_amd(clang: str, tmp_path: Path, arch: str) -> None:
    src = tmp_path / "layout.hip"
    src.write_text(layout_check())
    assert check.compile_amd(src, arch, clang) > 0


# LDS per workgroup: gfx942 (MI300) 64 KiB, gfx950 (MI350X/MI355X) 160 KiB.
LDS_BYTES = {"gfx942": 65536, "gfx950": 163840}
BUILDER_SMEM_FILES = check.BUILDER_SMEM_FILES  # (the sm_90a compile checks their static shared memory)


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_builder_kernels_fit_the_lds(clang: str, tmp_path: Path, arch: str) -> None:
    """Every kernel launched with the portable builder's dynamic shared memory fits the target's
    LDS with its own static shared variables (.amdhsa_group_segment_fixed_size): the Hopper
    layer's 225 KiB would not launch at all on AMD (it once asked for that everywhere)."""
    from kosmos import gemm

    dynamic = gemm.DEVICE_CONSTANTS["kSmemBytesPortable"]
    seen = 0
    for name in BUILDER_SMEM_FILES:
        check.compile_amd(hipsrc_dir() / name, arch, clang, keep=tmp_path)
        asm = (tmp_path / f"{Path(name).stem}.{arch}.s").read_text()
        kernels = re.findall(r"\.amdhsa_kernel (\S+)(.*?)\.end_amdhsa_kernel", asm, re.S)
        assert kernels, name
        for kernel, body in kernels:
            static = int(re.search(r"\.amdhsa_group_segment_fixed_size (\d+)", body).group(1))
            assert static + dynamic <= LDS_BYTES[arch], (kernel, static, dynamic)
            seen += 1
    assert seen >= 20


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_scaled_mfma_only_on_gfx950(clang: str, tmp_path: Path, arch: str) -> None:
    """The MXFP8 GEMM's block-scaled MFMA is compiled in for CDNA4 only (gfx942 has none)."""
    check.compile_amd(hipsrc_dir() / "mx.hip", arch, clang, keep=tmp_path)
    asm = (tmp_path / f"mx.{arch}.s").read_text()
    assert ("v_mfma_scale_f32_32x32x64_f8f6f4" in asm) == (arch == "gfx950")


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_amd_memory_model_in_assembly(clang: str, tmp_path: Path, arch: str) -> None:
    """System-scope acquire/release on CDNA3/4 must reach the hardware as sc0 sc1 plus L2 writeback/invalidate."""
    check.compile_amd(hipsrc_dir() / "symmetric.hip", arch, clang, keep=tmp_path)
    asm = (tmp_path / f"symmetric.{arch}.s").read_text()
    code = "\n".join(l for l in asm.splitlines() if l.startswith("\t") and not l.lstrip().startswith((".", ";")))
    # st_release_sys: write back L2 at system scope, then a system-scope store
    assert re.search(r"buffer_wbl2 sc0 sc1\s*\n(\s*s_waitcnt.*\n)*\s*(flat|global)_store_dwordx2 .* sc0 sc1", code), code
    # ld_acquire_sys: a system-scope load, then invalidate at system scope
    assert re.search(r"(flat|global)_load_dwordx2 .* sc0 sc1\s*\n(\s*s_waitcnt.*\n)*\s*buffer_inv sc0 sc1", code), code
    assert "s_memrealtime" in code  # now_ns(): the constant-rate clock
    assert "s_sleep" in code


def test_check_cli_needs_a_target() -> None:
    with pytest.raises(SystemExit):
        check.main([])


PRIMITIVES_PROBE = r"""
#include "kosmos/platform.h"
using namespace kosmos;
extern "C" __global__ void p_ld_sys(const u64* p, u64* o) { *o = ld_acquire_sys(p); }
extern "C" __global__ void p_ld_dev(const u64* p, u64* o) { *o = ld_acquire_dev(p); }
extern "C" __global__ void p_st_sys(u64* p, u64 v) { st_release_sys(p, v); }
extern "C" __global__ void p_red_sys(u64* p, u64 v) { red_release_sys_add(p, v); }
extern "C" __global__ void p_add_dev(u64* p, u64 v, u64* o) { *o = atomic_add_acq_rel_dev(p, v); }
extern "C" __global__ void p_fence_sys() { fence_acq_rel_sys(); }
extern "C" __global__ void p_fence_dev() { fence_acq_rel_dev(); }
extern "C" __global__ void p_ld16v(const void* p, vec16* o) { *o = ld16_volatile(p); }
extern "C" __global__ void p_ld_sys_u32(const u32* p, u32* o) { *o = ld_relaxed_sys_u32(p); }
"""

# gfx942/gfx950 (LLVM AMDGPU memory model for GFX942 and GFX950): sc0 sc1 = system scope on loads/stores and
# cache maintenance, sc1 = agent scope there; on RMW atomics sc1 = system scope (sc0 = returns).
EXPECTED_GFX942 = {
    "p_ld_sys": [r"global_load_dwordx2 .* sc0 sc1", r"buffer_inv sc0 sc1"],
    "p_ld_dev": [r"global_load_dwordx2 .* sc1", r"buffer_inv sc1"],
    "p_st_sys": [r"buffer_wbl2 sc0 sc1", r"global_store_dwordx2 .* sc0 sc1"],
    "p_red_sys": [r"buffer_wbl2 sc0 sc1", r"global_atomic_add_x2 .* sc1"],
    "p_add_dev": [r"buffer_wbl2 sc1", r"global_atomic_add_x2 .* sc0", r"buffer_inv sc1"],
    "p_fence_sys": [r"buffer_wbl2 sc0 sc1", r"buffer_inv sc0 sc1"],
    "p_fence_dev": [r"buffer_wbl2 sc1", r"buffer_inv sc1"],
    "p_ld16v": [r"global_load_dwordx2 .* sc0 sc1", r"global_load_dwordx2 .* offset:8 sc0 sc1"],
    "p_ld_sys_u32": [r"global_load_dword .* sc0 sc1"],  # the failure word peers write (wait.h)
}


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])  # MI300; MI350X/MI355X (same memory model in LLVM)
def test_amd_platform_primitives(clang: str, tmp_path: Path, arch: str) -> None:
    """Every scoped primitive of platform.h, in order, as the instructions it must become."""
    src = tmp_path / "primitives.hip"
    src.write_text(PRIMITIVES_PROBE)
    check.compile_amd(src, arch, clang, keep=tmp_path)
    bodies: dict[str, list[str]] = {}
    current = None
    for line in (tmp_path / f"primitives.{arch}.s").read_text().splitlines():
        m = re.match(r"^(p_\w+):", line)
        if m:
            current = bodies.setdefault(m.group(1), [])
        elif current is not None and line.startswith("\t") and not line.lstrip().startswith((".", ";")):
            current.append(line.strip())
    for fn, patterns in EXPECTED_GFX942.items():
        body, pos = bodies.get(fn, []), 0
        for pat in patterns:  # each expected instruction, in this order
            hit = next((i for i in range(pos, len(body)) if re.fullmatch(pat, body[i])), None)
            assert hit is not None, f"{fn}: no `{pat}` after instruction {pos}:\n" + "\n".join(body)
            pos = hit + 1


def test_serialized_wgmma_warnings_are_found() -> None:
    log = ("ptxas info    : (C7518) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
           "program dependence on compiler-inserted WG.DP in divergent path in the function 'kosmos_gemm_tn_bf16' in "
           "line 1071\nptxas info    : Used 168 registers, used 4 barriers\n")
    assert check.serialized_wgmma(log) == [
        "kosmos_gemm_tn_bf16 (due to program dependence on compiler-inserted WG.DP in divergent path)"]
    assert check.serialized_wgmma(b"ptxas info    : Used 8 registers\n") == []


def test_spill_stores_are_read_per_function() -> None:
    log = ("ptxas info    : Compiling entry function 'k_a' for 'sm_90a'\n"
           "ptxas info    : Function properties for k_a\n"
           "ptxas         .     296 bytes stack frame, 940 bytes spill stores, 988 bytes spill loads\n"
           "ptxas info    : Function properties for k_b\n"
           "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n")
    assert check.spill_stores(log) == {"k_a": 940, "k_b": 0}
    assert check.spill_stores(log.encode()) == {"k_a": 940, "k_b": 0}
    assert check.spill_stores("ptxas info    : Used 8 registers\n") == {}


def test_static_shared_memory_is_read_per_entry() -> None:
    log = ("ptxas info    : Compiling entry function 'k_a' for 'sm_90a'\n"
           "ptxas info    : Function properties for k_a\n"
           "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 168 registers, used 5 barriers, 1552 bytes smem, 1024 bytes cmem[0]\n"
           "ptxas info    : Compiling entry function 'k_b' for 'sm_90a'\n"
           "ptxas info    : Used 8 registers, used 0 barriers, 400 bytes cmem[0]\n")
    assert check.static_smem(log) == {"k_a": 1552}
    assert check.static_smem(log.encode()) == {"k_a": 1552}
    # the builder's plan leaves the grouped kernels' 1,552 B room, not a second 514-byte table
    assert 1552 + check.builder_smem_hopper() <= check.SM90_BLOCK_SMEM < 2066 + check.builder_smem_hopper()
