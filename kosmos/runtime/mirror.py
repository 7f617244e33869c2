"""Host mirrors of device structs and constants, and the compile-time check that they match.

The host builds kernel parameter records as NumPy structured scalars and names kernels, wait sites
and tile sizes with Python values; the device declares the same things in hipsrc/kosmos. Nothing is
read out of a header at run time. Instead `check_source()` is a translation unit of static_asserts
(every field's offset, size and kind, every struct's size and alignment, every constant's value, and
the enums' *_COUNT_ so a new enumerator needs its mirror) that compiles only while each mirror
matches its header; tests/test_compile.py compiles it through NVRTC
and for the AMD targets through clang, in CPU CI. Change a header without its mirror (or the
reverse) and CI fails naming the field.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np


@dataclass(frozen=True)
class StructMirror:
    ctype: str        # the C++ type, fully qualified (e.g. "kosmos::tp::AgParams")
    dtype: np.dtype   # its host mirror (aligned NumPy dtype, fields in declaration order)
    guard: str = ""   # a preprocessor condition where the struct exists only on some targets (checked there)
    alignment: int = 0  # the C alignment where it exceeds the fields' (alignas; NumPy cannot say it)


@dataclass(frozen=True)
class ConstantMirror:
    scope: str                  # C++ scope of the names (e.g. "kosmos::gemm")
    values: Mapping[str, int]   # name -> the value the host assumes


def _kind_assert(t: str, path: str, dt: np.dtype) -> str | None:
    """A static_assert that the field's C type is of the mirror's kind (float, signed or unsigned
    integer), so a same-size change (float <-> int32, i64 <-> u64) is caught too. u64 fields mirror
    pointers as well as integers: not checked."""
    f = f"decltype((({t}*)nullptr)->{path})"
    if dt.kind == "f":
        cond, what = f"({f})0.5 != 0", "a floating-point type"
    elif dt.kind == "i":
        cond, what = f"({f})0.5 == 0 && ({f})-1 < 0", "a signed integer"
    elif dt.kind == "u" and dt.itemsize < 8:
        cond, what = f"({f})0.5 == 0 && ({f})-1 > 0", "an unsigned integer"
    else:
        return None
    return f'static_assert({cond}, "{t}::{path}: {what}");'


def record(dtype: np.dtype, **fields) -> np.void:
    """A zeroed record of a mirrored struct's dtype with `fields` set (a kernel argument, passed by
    value); a name the dtype lacks raises ValueError."""
    rec = np.zeros((), dtype)
    for name, value in fields.items():
        if name not in dtype.names:
            raise ValueError(f"{dtype} has no field {name!r}")
        rec[name] = value
    return rec[()]


def address(a) -> int:
    """A device array's address for a pointer field: 0 (null) for None or an empty array."""
    return a.data.ptr if a is not None and a.size else 0


def struct_asserts(m: StructMirror) -> list[str]:
    """static_asserts of m.ctype's size, alignment and every (nested) field's offset, size and kind
    (under m.guard where it has one)."""
    t, dt = m.ctype, m.dtype
    out = [f'static_assert(sizeof({t}) == {dt.itemsize}, "{t}: size");',
           f'static_assert(alignof({t}) == {m.alignment or dt.alignment}, "{t}: alignment");']

    def fields(prefix: str, d: np.dtype, base: int) -> None:
        for name in d.names:
            fdt, off = d.fields[name][:2]
            path = prefix + name
            # Offsets through a member path (`c.epoch`): offsetof's designator, both compilers.
            out.append(f'static_assert(__builtin_offsetof({t}, {path}) == {base + off}, "{t}::{path}: offset");')
            out.append(f'static_assert(sizeof((({t}*)nullptr)->{path}) == {fdt.itemsize}, "{t}::{path}: size");')
            kind = None if fdt.names or fdt.subdtype else _kind_assert(t, path, fdt)
            if kind:
                out.append(kind)
            if fdt.names:
                fields(path + ".", fdt, base + off)

    fields("", dt, 0)
    return [f"#if {m.guard}", *out, "#endif"] if m.guard else out


def constant_asserts(m: ConstantMirror) -> list[str]:
    return [f'static_assert(static_cast<long long>({m.scope}::{k}) == {int(v)}, "{m.scope}::{k} == {int(v)}");'
            for k, v in m.values.items()]


def mirrors() -> tuple[list[str], list[StructMirror], list[ConstantMirror]]:
    """(headers, structs, constants): everything the host mirrors."""
    from .. import gemm
    from .. import mx, plan
    from ..moe.backward import MIRRORS as BACKWARD_MIRRORS
    from ..moe.combine import MIRRORS as COMBINE_MIRRORS
    from ..moe.dispatch import MIRRORS as DISPATCH_MIRRORS
    from ..moe.route import CONSTANTS as MOE_CONSTANTS, MIRRORS as MOE_MIRRORS
    from ..moe.router_grads import MIRRORS as ROUTER_GRADS_MIRRORS
    from ..tp import params, queues
    from . import records, status

    headers = ["kosmos/wait.h", "kosmos/gemm/tile.h", "kosmos/tp.h", "kosmos/tp_params.h", "kosmos/moe/route.h",
               "kosmos/moe/dispatch.h", "kosmos/moe/combine.h", "kosmos/moe/router.h", "kosmos/mx/quant.h",
               "kosmos/moe/backward.h", "kosmos/records.h"]
    structs = [StructMirror("kosmos::WaitCtx", status.WAIT_CTX_DTYPE),
               StructMirror("kosmos::Status", status.STATUS_DTYPE),
               StructMirror("kosmos::gemm::Problem", gemm.PROBLEM_DTYPE),
               StructMirror("kosmos::gemm::StreamK", gemm.STREAM_K_DTYPE),
               # Hopper only (builder_wgmma.h, through tile.h): checked by the sm_90a compile
               StructMirror("kosmos::gemm::SideCopy", gemm.SIDE_COPY_DTYPE, guard="KOSMOS_GEMM_WGMMA"),
               StructMirror("kosmos::gemm::EpiStoreBf16", gemm.EPI_DTYPE),
               StructMirror("kosmos::gemm::EpiStoreF32", gemm.EPI_DTYPE),
               StructMirror("kosmos::gemm::EpiSwiGLU", gemm.SWIGLU_EPI_DTYPE),
               StructMirror("kosmos::gemm::EpiSwiGLUBackward", gemm.SWIGLU_EPI_DTYPE),
               *(StructMirror(f"kosmos::gemm::JobRecord<kosmos::gemm::{e}>", gemm.job_record_dtype(dt), alignment=64)
                 for e, dt in (("EpiStoreF32", gemm.EPI_DTYPE), ("EpiSwiGLUBackward", gemm.SWIGLU_EPI_DTYPE))),
               *BACKWARD_MIRRORS, *ROUTER_GRADS_MIRRORS,
               *params.MIRRORS, *MOE_MIRRORS, *DISPATCH_MIRRORS,
               *COMBINE_MIRRORS,
               StructMirror("kosmos::RecordWords", records.WORDS_DTYPE, alignment=8)]
    constants = [ConstantMirror("kosmos::gemm", gemm.DEVICE_CONSTANTS),
                 ConstantMirror("kosmos::tp", {"kTileRow": queues.TILE_ROW}),
                 ConstantMirror("kosmos", {"kMaxWorld": plan.MAX_WORLD, "kRecordWords": records.WORDS}),  # (flags.h asserts OpFlags' size)
                 ConstantMirror("kosmos", {**status.KERNELS, "KERNEL_COUNT_": len(status.KERNELS)}),
                 ConstantMirror("kosmos", {**status.SITES, "SITE_COUNT_": len(status.SITES)}),
                 ConstantMirror("kosmos::moe", MOE_CONSTANTS),
                 ConstantMirror("kosmos::mx", {"kBlock": mx.BLOCK, "kEmaxE4M3": mx.E4M3_EMAX,
                                               "kScaleNaN": mx.SCALE_NAN, "kElementNaN": mx.ELEMENT_NAN})]
    return headers, structs, constants


def check_source() -> str:
    """A translation unit that compiles only while every mirror matches the device code."""
    headers, structs, constants = mirrors()
    lines = [f'#include "{h}"' for h in headers]
    for s in structs:
        lines += struct_asserts(s)
    for c in constants:
        lines += constant_asserts(c)
    # the 16-byte vector every mover loop moves (no host mirror: the host only sizes copies by it)
    lines.append('static_assert(sizeof(kosmos::vec16) == 16 && alignof(kosmos::vec16) == 16, "vec16");')
    return "\n".join(lines) + "\n"
