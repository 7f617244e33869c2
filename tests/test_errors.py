"""kosmos.errors: the hierarchy and what the messages tell a user."""
from __future__ import annotations

import pytest

import kosmos
from kosmos.errors import KosmosCompileError, KosmosError, KosmosResourceError, KosmosTimeoutError


def test_hierarchy() -> None:
    for cls in (KosmosTimeoutError, KosmosCompileError, KosmosResourceError):
        assert issubclass(cls, KosmosError)
    assert issubclass(KosmosError, RuntimeError)
    for name in ("KosmosError", "KosmosTimeoutError", "KosmosCompileError", "KosmosResourceError"):
        assert getattr(kosmos, name) is getattr(__import__("kosmos.errors", fromlist=[name]), name)


def test_timeout_message_names_kernel_rank_site_budget() -> None:
    e = KosmosTimeoutError("KERNEL_ALL_GATHER", 3, "SITE_PEER_READY", 2.5)
    msg = str(e)
    assert (e.kernel, e.rank, e.site, e.budget_s) == ("KERNEL_ALL_GATHER", 3, "SITE_PEER_READY", 2.5)
    assert "kernel KERNEL_ALL_GATHER on rank 3 gave up waiting at SITE_PEER_READY after 2.5 s" in msg
    assert "finalize" in msg  # tells the user what to do next


def test_timeout_is_catchable_as_kosmos_error() -> None:
    with pytest.raises(KosmosError):
        raise KosmosTimeoutError("k", 0, "s", 1.0)
