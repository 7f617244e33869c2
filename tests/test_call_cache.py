"""kosmos.runtime.call_cache's host logic (no GPU): which calls may take the cached path."""
import numpy as np
import pytest

pytest.importorskip("cupy")

from kosmos.runtime.call_cache import CallCache, call_signature  # noqa: E402


def test_only_cupy_arrays_and_hashable_options_get_a_key():
    assert call_signature(np.zeros(4), None, layout="TN") is None  # a host (or foreign) array


def test_the_cache_starts_over_when_full_and_ignores_keyless_calls():
    cache = CallCache(size=2)
    cache.put(None, "never")
    assert cache.get(None) is None
    cache.put(("a",), 1)
    cache.put(("b",), 2)
    assert cache.get(("a",)) == 1
    cache.put(("c",), 3)  # full: starts over
    assert cache.get(("a",)) is None and cache.get(("c",)) == 3
