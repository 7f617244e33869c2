"""kosmos.runtime.source: where kernels live, the source digest, compile options per backend."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from kosmos.runtime import source
from kosmos.runtime.source import compile_options, hipsrc_dir, kernel_files, nvidia_arch, tree_digest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    dst = tmp_path / "hipsrc"
    shutil.copytree(hipsrc_dir(), dst)
    tree_digest.cache_clear()
    yield dst
    tree_digest.cache_clear()


def test_hipsrc_dir_has_platform_and_kernels() -> None:
    root = hipsrc_dir()
    assert (root / "kosmos" / "platform.h").is_file()
    files = kernel_files()
    assert files and all(f.suffix == ".hip" and f.parent == root for f in files)
    assert "symmetric.hip" in {f.name for f in files}


def test_checkout_hipsrc_is_preferred() -> None:
    assert hipsrc_dir() == REPO / "hipsrc" or hipsrc_dir().name == "_hipsrc"


def test_env_override(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KOSMOS_HIPSRC", str(tree))
    assert hipsrc_dir() == tree


def test_the_lookup_follows_the_env_every_call(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hipsrc_dir is memoized (load_module asks on every launch) but keyed on $KOSMOS_HIPSRC."""
    monkeypatch.delenv("KOSMOS_HIPSRC", raising=False)
    first = hipsrc_dir()
    monkeypatch.setenv("KOSMOS_HIPSRC", str(tree))
    assert hipsrc_dir() == tree
    monkeypatch.delenv("KOSMOS_HIPSRC")
    assert hipsrc_dir() == first != tree


def test_env_override_ignored_when_not_a_source_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KOSMOS_HIPSRC", str(tmp_path))
    assert hipsrc_dir() != tmp_path


def test_missing_sources_say_where_they_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "a" / "b" / "source.py"
    monkeypatch.setattr(source, "__file__", str(fake))
    monkeypatch.delenv("KOSMOS_HIPSRC", raising=False)
    with pytest.raises(FileNotFoundError, match="kernel sources not found"):
        hipsrc_dir()


def test_digest_is_stable(tree: Path) -> None:
    d = tree_digest(str(tree))
    assert re.fullmatch(r"[0-9a-f]{16}", d)
    tree_digest.cache_clear()
    assert tree_digest(str(tree)) == d


@pytest.mark.parametrize("rel", ["kosmos/wait.h", "kosmos/platform.h", "symmetric.hip"])
def test_digest_changes_when_a_source_changes(tree: Path, rel: str) -> None:
    before = tree_digest(str(tree))
    p = tree / rel
    p.write_text(p.read_text() + "\n// edited\n")
    tree_digest.cache_clear()
    assert tree_digest(str(tree)) != before


def test_digest_changes_when_a_header_is_added_or_renamed(tree: Path) -> None:
    before = tree_digest(str(tree))
    (tree / "kosmos" / "new.h").write_text("#pragma once\n")
    tree_digest.cache_clear()
    added = tree_digest(str(tree))
    assert added != before
    (tree / "kosmos" / "new.h").rename(tree / "kosmos" / "other.h")
    tree_digest.cache_clear()
    assert tree_digest(str(tree)) not in (before, added)


def test_digest_ignores_non_sources(tree: Path) -> None:
    before = tree_digest(str(tree))
    (tree / "NOTES.txt").write_text("not a source")
    tree_digest.cache_clear()
    assert tree_digest(str(tree)) == before


@pytest.mark.parametrize("cc,arch", [((9, 0), "sm_90a"), ((8, 0), "sm_80"), ((8, 9), "sm_89"), ((10, 0), "sm_100"),
                                     ((7, 0), "sm_70")])
def test_nvidia_arch(cc: tuple[int, int], arch: str) -> None:
    assert nvidia_arch(*cc) == arch


def test_cuda_options() -> None:
    opts = compile_options("cuda", "sm_90a")
    assert "-std=c++17" in opts
    assert f"-I{hipsrc_dir()}" in opts
    assert "-arch=sm_90a" in opts
    digest = [o for o in opts if o.startswith("-DKOSMOS_SRC_DIGEST=")]
    assert digest == [f"-DKOSMOS_SRC_DIGEST=0x{tree_digest(str(hipsrc_dir()))}"]
    assert isinstance(opts, tuple)  # hashable: part of the module cache key


def test_cuda_options_without_arch() -> None:
    assert not any(o.startswith("-arch") for o in compile_options("cuda"))


def test_hip_options_have_no_arch() -> None:
    opts = compile_options("hip", "sm_90a")
    assert not any(o.startswith("-arch") or o.startswith("--offload-arch") for o in opts)
    assert f"-I{hipsrc_dir()}" in opts
    assert any(o.startswith("-DKOSMOS_SRC_DIGEST=0x") for o in opts)


def test_unknown_backend() -> None:
    with pytest.raises(ValueError, match="unknown backend"):
        compile_options("metal")


def test_kernel_tree_switches_the_sources_and_restores_them(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KOSMOS_HIPSRC", raising=False)
    (tree / "kosmos" / "trace.h").write_text((tree / "kosmos" / "trace.h").read_text() + "\n// tree B\n")
    mine = compile_options("cuda", "sm_90a")
    with source.kernel_tree(tree) as root:
        assert root == tree.resolve() and hipsrc_dir() == tree.resolve()
        theirs = compile_options("cuda", "sm_90a")
    assert hipsrc_dir() != tree.resolve() and compile_options("cuda", "sm_90a") == mine
    # the module cache keys on the options: another tree, another key (its path and its digest)
    assert theirs != mine and f"-I{tree.resolve()}" in theirs
    digest = [o for o in theirs if o.startswith("-DKOSMOS_SRC_DIGEST")]
    assert digest and digest[0] not in mine


def test_kernel_tree_restores_the_environment_after_an_error(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KOSMOS_HIPSRC", "/somewhere/else")
    with pytest.raises(RuntimeError, match="inside"):
        with source.kernel_tree(tree):
            raise RuntimeError("inside")
    import os

    assert os.environ["KOSMOS_HIPSRC"] == "/somewhere/else"


def test_in_kernel_tree_calls_inside_the_tree_and_returns(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KOSMOS_HIPSRC", raising=False)
    seen = []
    run = source.in_kernel_tree(tree, lambda i, k=0: seen.append((hipsrc_dir(), i, k)) or i + k)
    assert hipsrc_dir() != tree.resolve()  # not before the call
    assert run(3, k=4) == 7
    assert seen == [(tree.resolve(), 3, 4)] and hipsrc_dir() != tree.resolve()


def test_kernel_tree_refuses_a_directory_without_sources(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a hipsrc tree"):
        with source.kernel_tree(tmp_path):
            pass


def test_each_fused_moe_kernel_is_in_its_own_file() -> None:
    """kosmos.moe.dispatch.fused_kernel_file: every fused launch the layer builds (the forward and
    both backward weight-gradient types) names a file that defines that kernel and no other."""
    from kosmos.moe.dispatch import fused_kernel_file

    defined = re.compile(r"\b(kosmos_moe_(?:forward|backward_\w+))\s*\(|KOSMOS_MOE_BACKWARD_KERNEL\((\w+),")
    for kernel in ("kosmos_moe_forward", "kosmos_moe_backward_f32", "kosmos_moe_backward_bf16"):
        text = (hipsrc_dir() / fused_kernel_file(kernel)).read_text()
        names = {a or b for a, b in defined.findall(text)}
        assert names == {kernel}, (kernel, names)
    with pytest.raises(ValueError, match="not a fused MoE kernel"):
        fused_kernel_file("kosmos_gemm_tn_bf16")
