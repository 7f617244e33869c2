"""kosmos.runtime.warm: which files it compiles, in what order, and how it reports (no GPU: the
compile function is a stand-in; on a GPU `python3 -m kosmos.runtime.warm` runs load_module)."""
from __future__ import annotations

import pytest

from kosmos.runtime import warm
from kosmos.runtime.source import kernel_files


def test_every_kernel_file_by_default_largest_first() -> None:
    names = warm.files_to_warm([])
    sizes = {f.name: f.stat().st_size for f in kernel_files()}
    assert sorted(names) == sorted(sizes)
    assert [sizes[n] for n in names] == sorted(sizes.values(), reverse=True)


def test_named_files_once_each_and_unknown_names_refused() -> None:
    assert sorted(warm.files_to_warm(["timing.hip", "moe_fused.hip", "timing.hip"])) == ["moe_fused.hip", "timing.hip"]
    with pytest.raises(ValueError, match="nope.hip"):
        warm.files_to_warm(["timing.hip", "nope.hip"])
    assert warm.main(["nope.hip"]) == 2


def test_a_failed_compile_is_named_and_the_others_still_run() -> None:
    seen, lines = [], []

    def fake(name: str) -> float:
        seen.append(name)
        if name == "b.hip":
            raise RuntimeError("compile error in b")
        return 1.5

    failed = warm.warm(["a.hip", "b.hip", "c.hip"], jobs=1, compile_fn=fake, echo=lines.append)
    assert failed == ["b.hip"] and seen == ["a.hip", "b.hip", "c.hip"]
    assert any(line.startswith("FAIL b.hip") and "compile error in b" in line for line in lines)
    assert sum(line.startswith("ok ") for line in lines) == 2
