"""kosmos.runtime.status: names from wait.h, the WaitCtx layout, the host side of the status word."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from kosmos.errors import KosmosTimeoutError
from kosmos.runtime.status import WAIT_CTX_DTYPE, DeviceStatus, kernel_and_site_names, kernel_id



def test_wait_ctx_mirror() -> None:
    # the fields every kernel relies on (the layout itself is checked at compile time: test_compile.py)
    assert {"status", "budget_ns", "kernel", "rank"} <= set(WAIT_CTX_DTYPE.names)
    assert WAIT_CTX_DTYPE.fields["status"][1] == 0 and WAIT_CTX_DTYPE.alignment == 8


def test_kernel_and_site_names_are_one_to_one() -> None:
    from kosmos.runtime.status import KERNELS, SITES

    for names in (KERNELS, SITES):
        assert sorted(names.values()) == list(range(len(names)))  # 0..n-1, no two names for one value
    kernels, sites = kernel_and_site_names()
    assert kernels[0] == "KERNEL_NONE" and sites[0] == "SITE_NONE"


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
