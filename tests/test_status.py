"""kosmos.runtime.status: names from wait.h, the WaitCtx layout, the host side of the status word."""
from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

from kosmos.errors import KosmosTimeoutError
from kosmos.runtime import hipsrc_dir
from kosmos.runtime.status import WAIT_CTX_DTYPE, DeviceStatus, kernel_and_site_names, kernel_id, parse_enum

WAIT_H = (hipsrc_dir() / "kosmos" / "wait.h").read_text()


C_SIZES = {"u64": 8, "u32": 4, "i64": 8, "i32": 4}


def c_struct_layout(text: str, name: str) -> list[tuple[str, int, int]]:
    """(member, offset, size) of a C struct of pointers and fixed-width integers, natural alignment."""
    body = re.search(r"struct\s+" + name + r"\s*\{(.*?)\};", text, re.S).group(1)
    out, off = [], 0
    for ctype, star, member in re.findall(r"^\s*(?:const\s+)?(\w+)\s*(\*?)\s*(\w+)\s*;", body, re.M):
        size = 8 if star else C_SIZES[ctype]
        off = (off + size - 1) // size * size
        out.append((member, off, size))
        off += size
    return out


def test_wait_ctx_layout_matches_the_c_struct() -> None:
    layout = c_struct_layout(WAIT_H, "WaitCtx")
    assert [m for m, _, _ in layout] == list(WAIT_CTX_DTYPE.names)
    for member, off, size in layout:
        dt, dt_off = WAIT_CTX_DTYPE.fields[member][:2]
        assert (dt_off, dt.itemsize) == (off, size), member
    end = layout[-1][1] + layout[-1][2]
    assert WAIT_CTX_DTYPE.itemsize == (end + 7) // 8 * 8
    assert WAIT_CTX_DTYPE.alignment == 8
    # the fields every kernel relies on
    assert {"status", "budget_ns", "kernel", "rank"} <= set(WAIT_CTX_DTYPE.names)
    assert WAIT_CTX_DTYPE.fields["status"][1] == 0


def test_c_struct_layout_parser() -> None:
    text = "struct S {\n  Status* a;  // c\n  u32 b;\n  u64 c;\n  u32 d;\n};"
    assert c_struct_layout(text, "S") == [("a", 0, 8), ("b", 8, 4), ("c", 16, 8), ("d", 24, 4)]


def test_parse_enum_of_wait_h() -> None:
    kernels = parse_enum(WAIT_H, "KernelId")
    sites = parse_enum(WAIT_H, "WaitSite")
    assert kernels[0] == "KERNEL_NONE" and sites[0] == "SITE_NONE"
    assert kernels[1] == "KERNEL_ALL_GATHER"
    assert "SITE_BARRIER" in sites.values() and "SITE_PROBE" in sites.values()
    # every enumerator line was parsed (a line the regex misses would name a site "site#N")
    for name, values in (("KernelId", kernels), ("WaitSite", sites)):
        body = WAIT_H.split(f"enum {name}")[1].split("};")[0]
        assert len(values) == body.count(" = "), name
        assert sorted(values) == list(range(len(values))), f"{name} values are not 0..n-1"


def test_parse_enum_handles_comments_and_missing_enums() -> None:
    text = "enum Foo : u32 {\n  A = 0,   // first\n  B_2 = 7,\n};\nenum Bar { X = 1, };"
    assert parse_enum(text, "Foo") == {0: "A", 7: "B_2"}
    with pytest.raises(ValueError, match="enum Baz not found"):
        parse_enum(text, "Baz")
    with pytest.raises(ValueError):
        parse_enum(text, "Fo")  # a prefix of a name is not the name


def test_kernel_id() -> None:
    kernels, sites = kernel_and_site_names()
    assert kernel_id("KERNEL_ALL_GATHER") == 1
    assert kernel_id("KERNEL_BARRIER") == [v for v, k in kernels.items() if k == "KERNEL_BARRIER"][0]
    with pytest.raises(KeyError):
        kernel_id("KERNEL_NO_SUCH_THING")


def _host_only_status(rank: int = 2, budget_s: float = 1.5) -> DeviceStatus:
    """A DeviceStatus over ordinary host memory: the host logic without a GPU."""
    st = DeviceStatus.__new__(DeviceStatus)
    st._buf = (ctypes.c_uint32 * 4)()
    st._ptr = ctypes.addressof(st._buf)
    st._words = st._buf
    st.rank, st.budget_s, st.failures = rank, budget_s, 0
    st._world = (0, 0, 0, 1)
    return st


def test_wait_ctx_record() -> None:
    st = _host_only_status(rank=3, budget_s=2.5)
    ctx = st.wait_ctx(kernel_id("KERNEL_REDUCE_SCATTER"))
    assert ctx.dtype == WAIT_CTX_DTYPE
    assert int(ctx["status"]) == st.device_ptr
    assert int(ctx["budget_ns"]) == 2_500_000_000
    assert int(ctx["kernel"]) == kernel_id("KERNEL_REDUCE_SCATTER")
    assert int(ctx["rank"]) == 3
    assert int(st.wait_ctx(1, budget_s=0.001)["budget_ns"]) == 1_000_000
    assert len(ctx.tobytes()) == WAIT_CTX_DTYPE.itemsize == 64
    assert (int(ctx["told"]), int(ctx["peers"]), int(ctx["world"])) == (0, 0, 1)  # alone: nobody to tell
    st.attach_world(0x1000, 0x2000, 256, 4)
    ctx = st.wait_ctx(1)
    assert (int(ctx["told"]), int(ctx["peers"]), int(ctx["told_off"]), int(ctx["world"])) == (0x1000, 0x2000, 256, 4)


def test_status_word_ok_then_timeout() -> None:
    st = _host_only_status(rank=2, budget_s=1.5)
    st.raise_if_failed()  # all zero: nothing happens
    kernels, sites = kernel_and_site_names()
    site = [v for v, k in sites.items() if k == "SITE_BARRIER"][0]
    st._words[:] = [1, kernel_id("KERNEL_ALL_GATHER"), 1, site]
    with pytest.raises(KosmosTimeoutError) as e:
        st.raise_if_failed()
    err = e.value
    assert (err.kernel, err.rank, err.site, err.budget_s) == ("KERNEL_ALL_GATHER", 1, "SITE_BARRIER", 1.5)
    assert st.failures == 1
    assert list(st._words) == [0, 0, 0, 0]  # cleared: the next check passes
    st.raise_if_failed()


def test_status_word_names_the_peer_that_failed_first() -> None:
    st = _host_only_status(rank=1)
    kernels, sites = kernel_and_site_names()
    st._words[:] = [2 + 3, kernel_id("KERNEL_GEMM_RS"), 1, [v for v, k in sites.items() if k == "SITE_SENTINEL"][0]]
    with pytest.raises(KosmosTimeoutError, match="on rank 1 stopped waiting at SITE_SENTINEL because rank 3 failed first") as e:
        st.raise_if_failed()
    assert e.value.failed_peer == 3 and st.failures == 1


def test_status_word_unknown_ids_still_named() -> None:
    st = _host_only_status()
    st._words[:] = [1, 999, 0, 998]
    with pytest.raises(KosmosTimeoutError, match=r"kernel#999.*site#998"):
        st.raise_if_failed()


def test_wait_ctx_dtype_packs_into_kernel_arguments() -> None:
    # CuPy passes a numpy.void of this dtype by value; its bytes must be the C struct's.
    ctx = np.zeros((), WAIT_CTX_DTYPE)
    ctx["status"], ctx["abort"], ctx["budget_ns"], ctx["kernel"], ctx["rank"] = 0x1122334455667788, 9, 5, 6, 7
    raw = ctx.tobytes()
    assert raw[:8] == (0x1122334455667788).to_bytes(8, "little") and raw[8:16] == (9).to_bytes(8, "little")
    k, rk = WAIT_CTX_DTYPE.fields["kernel"][1], WAIT_CTX_DTYPE.fields["rank"][1]
    assert raw[k:k + 4] == (6).to_bytes(4, "little") and raw[rk:rk + 4] == (7).to_bytes(4, "little")
