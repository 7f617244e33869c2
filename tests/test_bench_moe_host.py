"""bench/moe.py's shares of a model (CPU): P EP-8 ranks' experts and top-k, tokens per rank, and the
same per-rank GEMM work at every world size."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

moe_bench = pytest.importorskip("moe")  # bench/moe.py


@pytest.mark.parametrize("name", ["DeepSeek-V3", "Qwen3-235B-A22B", "Qwen3-30B-A3B"])
def test_shares_keep_each_ranks_work(name):
    from kosmos.moe import load_models

    full = load_models()[name]
    assert moe_bench.share(name, 8).experts == full.experts and moe_bench.share(name, 8).top_k == full.top_k
    rows = 2048
    per_rank, tokens = set(), set()
    for p in (1, 2, 4, 8):
        cfg = moe_bench.share(name, p)
        assert cfg.experts == full.experts // 8 * p and cfg.experts % p == 0
        assert cfg.top_k == full.top_k  # these models have >= k experts a rank: the model's routing
        t = moe_bench.tokens_of(cfg, rows, p)
        per_rank.add(t * cfg.top_k)  # routed rows a rank sends: its share of E * rows
        tokens.add(t)  # and its tokens (the shared experts' and the router's work): the 8-GPU model's
        assert t * cfg.top_k * p == cfg.experts * rows
    assert len(per_rank) == 1 and len(tokens) == 1, (per_rank, tokens)


def test_a_share_with_fewer_experts_than_k_routes_to_all_of_them():
    cfg = moe_bench.share("Mixtral-8x7B", 1)  # 8 experts top-2: one expert a rank
    assert (cfg.experts, cfg.top_k) == (1, 1)


def test_more_than_eight_ranks_refused():
    with pytest.raises(SystemExit, match="1 to 8 ranks"):
        moe_bench.share("DeepSeek-V3", 16)


def test_capacity_is_dropless_alone_and_three_means_over_ranks():
    cfg1, cfg8 = moe_bench.share("DeepSeek-V3", 1), moe_bench.share("DeepSeek-V3", 8)
    t1, t8 = moe_bench.tokens_of(cfg1, 2048, 1), moe_bench.tokens_of(cfg8, 2048, 8)
    assert moe_bench.capacity_of(cfg1, t1, 1) == t1 * cfg1.top_k  # every row a rank can receive
    assert moe_bench.capacity_of(cfg8, t8, 8) == 3 * t8 * cfg8.top_k  # not 8 ranks' worth


def test_bytes_out_counts_rows_to_other_ranks_both_ways():
    import numpy as np

    # 2 ranks, 2 experts each: all_counts[s, e] rows from source s to expert e
    c = np.array([[5, 1, 2, 3],     # rank 0 sends 6 rows to itself, 5 to rank 1
                  [7, 0, 4, 4]])    # rank 1 sends 7 to rank 0, 8 to itself
    assert moe_bench.bytes_out(c, 0, 2, 10) == (5 + 7) * 10  # dispatch out 5, combine back out 7
    assert moe_bench.bytes_out(c, 1, 2, 10) == (7 + 5) * 10
    assert moe_bench.bytes_out(c[:1, :2], 0, 2, 10) == 0     # alone: nothing crosses


@pytest.mark.parametrize("backward", [False, True])
def test_plot_writes_a_png(tmp_path, backward):
    pytest.importorskip("matplotlib")
    names = ["backward", "bwd gemms", "bwd dense"] if backward else ["layer", "experts", "dense", "baseline"]
    results = [{"model": m, "rows_per_expert": rows, "skew": False, "ranks": 1,
                **{n: {"ms": 1.0, "tflops": 100.0 + j} for j, n in enumerate(names)}}
               for m in ("A", "B") for rows in (256, 2048)]
    path = tmp_path / "moe.png"
    moe_bench.plot(results, path, backward)
    assert path.stat().st_size > 1000


def test_fused_contenders_by_movers_crew_and_drop(monkeypatch):
    """--drop d: each (movers, crew) contender again with capacity_factor d; names say which."""
    built = {}

    def layer(world, cfg, **kw):
        built[(kw["movers"], kw["crew"], cfg.capacity_factor)] = kw["path"]
        return cfg

    monkeypatch.setattr(moe_bench, "MoELayer", layer)
    cfg = moe_bench.share("Qwen3-30B-A3B", 1)
    got = moe_bench.fused_layers(None, cfg, 64, 64, (None, 8), (None,), (None, 1.25))
    assert list(got) == ["fused m=auto", "fused m=auto drop=1.25", "fused m=8", "fused m=8 drop=1.25"]
    assert got["fused m=8 drop=1.25"].capacity_factor == 1.25 and got["fused m=8"].capacity_factor == 0
    assert set(built.values()) == {"fused"} and len(built) == 4


def test_tree_b_layers_are_built_and_first_called_with_their_kernels(monkeypatch, tmp_path):
    """--tree-b: the "<name> B" layers are built, and make their first forward and backward (where
    a layer builds its lazily made launches), inside kernel_tree(B); this tree's layers outside."""
    import os

    tree = tmp_path / "hipsrc"
    (tree / "kosmos").mkdir(parents=True)
    (tree / "kosmos" / "platform.h").write_text("")
    seen = []

    class Layer:  # records the kernel tree each step ran under
        def __init__(self, *args, movers=None, **kwargs):
            self.name = f"m={movers}"
            seen.append(("build", self.name, os.environ.get("KOSMOS_HIPSRC")))

        def forward(self, x, params, check=False):
            seen.append(("forward", self.name, os.environ.get("KOSMOS_HIPSRC")))
            return None, "ctx"

        def backward(self, dy, ctx, params):
            seen.append(("backward", self.name, os.environ.get("KOSMOS_HIPSRC")))

    monkeypatch.setattr(moe_bench, "MoELayer", Layer)
    monkeypatch.delenv("KOSMOS_HIPSRC", raising=False)
    cfg = moe_bench.share("Qwen3-30B-A3B", 1)
    layers = moe_bench.fused_layers(None, cfg, 64, 64, (None, 4), (None,), tree_b=str(tree))
    assert list(layers) == ["fused m=auto", "fused m=4", "fused m=auto B", "fused m=4 B"]
    moe_bench.warm_b(layers, str(tree), "x", "params", dy="dy")
    b = str(tree.resolve())
    assert seen == [("build", "m=None", None), ("build", "m=4", None), ("build", "m=None", b), ("build", "m=4", b),
                    ("forward", "m=None", b), ("backward", "m=None", b), ("forward", "m=4", b), ("backward", "m=4", b)]
    assert "KOSMOS_HIPSRC" not in os.environ
    seen.clear()
    assert list(moe_bench.fused_layers(None, cfg, 64, 64, (None,), (None,))) == ["fused m=auto"]
    moe_bench.warm_b({"fused m=auto": Layer()}, "", "x", "params")
    assert seen == [("build", "m=None", None)] * 2  # no tree B: no B layer, nothing warmed
