"""kosmos.runtime.warm: which files it compiles, in what order, and how it reports (no GPU: the
compile function is a stand-in; on a GPU `python3 -m kosmos.runtime.warm` runs load_module)."""
from __future__ import annotations

import pytest

from kosmos.runtime import warm
from kosmos.runtime.source import kernel_files


def test_every_kernel_file_by_default_most_source_first() -> None:
    names = warm.files_to_warm([])
    sizes = {f.name: warm.source_bytes(f) for f in kernel_files()}
    assert sorted(names) == sorted(sizes)
    assert [sizes[n] for n in names] == sorted(sizes.values(), reverse=True)
    # a few-line file that includes the MoE forward's headers reads more than all of timing.hip
    assert sizes["moe_fused_forward.hip"] > 10 * sizes["timing.hip"]


def test_source_bytes_counts_each_header_once(tmp_path) -> None:
    (tmp_path / "a.h").write_text('#pragma once\n#include "b.h"\n')
    (tmp_path / "b.h").write_text("int b;\n")
    (tmp_path / "k.hip").write_text('#include "a.h"\n#include "b.h"\n#include <cstdint>\n')
    sizes = [len(p.read_bytes()) for p in (tmp_path / "k.hip", tmp_path / "a.h", tmp_path / "b.h")]
    assert warm.source_bytes(tmp_path / "k.hip") == sum(sizes)


def test_named_files_once_each_and_unknown_names_refused() -> None:
    assert sorted(warm.files_to_warm(["timing.hip", "moe_fused_forward.hip", "timing.hip"])) == [
        "moe_fused_forward.hip", "timing.hip"]
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
