"""The host logic of kosmos.symmetric: bump allocation (identical offsets on every rank), sizes."""
from __future__ import annotations

import pytest

from kosmos.errors import KosmosError, KosmosResourceError
from kosmos.symmetric import ALIGN, BumpAllocator, align_up, check_world_size


def test_align_up() -> None:
    assert ALIGN % 128 == 0  # TMA and 16-byte vectors
    assert [align_up(n) for n in (0, 1, ALIGN - 1, ALIGN, ALIGN + 1)] == [0, ALIGN, ALIGN, ALIGN, 2 * ALIGN]
    assert align_up(17, 16) == 32 and align_up(32, 16) == 32


def test_offsets_are_aligned_and_in_call_order() -> None:
    a = BumpAllocator(4096)
    offs = [a.take(n) for n in (1, 300, 0, 16, 256)]
    assert offs == [0, 256, 768, 768, 1024]
    assert all(o % ALIGN == 0 for o in offs)
    assert a.top == 1280


def test_same_calls_same_offsets() -> None:
    sizes = [13, 4096, 7, 255, 256, 1000]
    a, b = BumpAllocator(1 << 20), BumpAllocator(1 << 20)
    assert [a.take(n) for n in sizes] == [b.take(n) for n in sizes]


def test_custom_alignment() -> None:
    a = BumpAllocator(1024, align=64)
    assert [a.take(10), a.take(10), a.take(64)] == [0, 64, 128]


def test_exact_fill_then_overflow() -> None:
    a = BumpAllocator(1024)
    assert a.take(512) == 0
    assert a.take(512) == 512  # exactly full is fine
    with pytest.raises(KosmosResourceError, match=r"symmetric heap full: 1 B requested at offset 1024 of 1024 B"):
        a.take(1)
    assert a.top == 1024  # a failed take leaves the allocator as it was


def test_overflow_by_alignment_padding() -> None:
    a = BumpAllocator(512)
    a.take(1)
    with pytest.raises(KosmosResourceError, match="SymmetricHeap"):
        a.take(257)  # 256 + 257 > 512 once aligned


def test_overflow_is_a_kosmos_error() -> None:
    with pytest.raises(KosmosError):
        BumpAllocator(0).take(1)


def test_negative_size() -> None:
    with pytest.raises(ValueError, match="negative"):
        BumpAllocator(1024).take(-1)


@pytest.mark.parametrize("n", [1, 2, 3, 8, 16])
def test_world_sizes_supported(n: int) -> None:
    check_world_size(n)


@pytest.mark.parametrize("n", [0, -1, 17])
def test_world_sizes_refused(n: int) -> None:
    with pytest.raises(KosmosError, match=f"world size {n} not supported"):
        check_world_size(n)
