"""The device routing rule and dispatch plan (hipsrc/kosmos/moe/route.h, plan.h) compiled for the
host and run on the CPU, against the float64 reference: the same decisions on every model
configuration and on exact ties, weights within 1e-6, the plan equal to reference.dispatch_order,
the aux and z losses within 1e-5. (The same code on the GPU: tests/gpu/test_moe_route.py.)
Needs a host C++ compiler (c++, g++ or clang++); without one it skips, unless KOSMOS_REQUIRE_TOOLCHAINS=1.
"""
from __future__ import annotations

import dataclasses
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kosmos.moe import MoEConfig, load_models, reference
from kosmos.moe.route import CONSTANTS, keep_words, place_words

from host_build import build


@pytest.fixture(scope="module")
def route_host(tmp_path_factory) -> Path:
    return build("route_main.cpp", tmp_path_factory.mktemp("route") / "route_host")


def host_route(exe: Path, cfg: MoEConfig, logits: np.ndarray, bias: np.ndarray | None = None,
               lanes: int = 1, ctas: int = 1) -> dict:
    """The harness's routing; under token dropping (cfg.capacity_of) the keep rule runs over `ctas`
    CTAs of `lanes` threads and got["kept"] [T, k] bool comes back too."""
    t, width = logits.shape
    e, k = cfg.experts, cfg.top_k
    score = CONSTANTS["SCORE_SOFTMAX"] if cfg.score == "softmax" else CONSTANTS["SCORE_SIGMOID"]
    cap = cfg.capacity_of(t)
    cap = cap if cap is not None and cap < t * k else -1
    head = (struct.pack("<8i", t, e, width, k, score, cfg.groups, cfg.topk_groups, int(cfg.normalize))
            + struct.pack("<3f4i", cfg.scaling, cfg.aux_loss_coef, cfg.z_loss_coef, bias is not None, cap, lanes,
                          ctas))
    body = (b"" if bias is None else bias.astype(np.float32).tobytes()) + logits.astype(np.float32).tobytes()
    out = memoryview(subprocess.run([str(exe)], input=head + body, capture_output=True, check=True).stdout)
    got, at = {}, 0
    for name, dt, n in (("experts", np.int32, t * k), ("weights", np.float32, t * k), ("order", np.int32, t * k),
                        ("slot", np.int32, t * k), ("start", np.int32, e + 1), ("mean_prob", np.float32, e),
                        ("losses", np.float32, 2)):
        got[name] = np.frombuffer(out[at:at + 4 * n], dt)
        at += 4 * n
    if cap >= 0:
        got["kept"] = np.frombuffer(out[at:at + t * k], np.uint8).reshape(t, k)
        assert set(np.unique(got["kept"])) <= {0, 1}
        got["kept"] = got["kept"].astype(bool)
        at += t * k
        # the shared words the header's rule takes: the launch's smem check reads route.keep_words
        assert int(np.frombuffer(out[at:at + 4], np.int32)[0]) == keep_words(e, lanes)
        at += 4
    # and the placement's before them (route.launch_scratch_bytes: both)
    assert int(np.frombuffer(out[at:at + 4], np.int32)[0]) == place_words(e)
    at += 4
    assert at == len(out)
    got["experts"], got["weights"] = got["experts"].reshape(t, k), got["weights"].reshape(t, k)
    return got


def padded_logits(rng, t: int, e: int, values=None) -> np.ndarray:
    out = np.full((t, -(-e // 64) * 64 + 64), np.nan, np.float32)  # columns past E: NaN, never read
    out[:, :e] = rng.standard_normal((t, e)) * 2 if values is None else values
    return out


def check_plan(got: dict, cfg: MoEConfig) -> None:
    t = got["experts"].shape[0]
    order, counts = reference.dispatch_order(got["experts"], cfg.experts)
    assert (got["order"] == order).all()
    assert (got["start"] == np.concatenate([[0], np.cumsum(counts)])).all()
    assert (got["slot"][got["order"]] == np.arange(t * cfg.top_k)).all()


@pytest.mark.parametrize("name", sorted(load_models()))
def test_the_rule_and_plan_match_the_reference(route_host, name):
    cfg = dataclasses.replace(load_models()[name], aux_loss_coef=0.01, z_loss_coef=0.001)
    rng = np.random.default_rng([7, cfg.experts, cfg.top_k])
    bias = (rng.standard_normal(cfg.experts) * 0.05).astype(np.float32) if cfg.expert_bias else None
    logits = padded_logits(rng, 1029, cfg.experts)  # odd: the last chunk is partial
    got = host_route(route_host, cfg, logits, bias)
    ref = reference.route(logits[:, :cfg.experts].astype(np.float64), cfg,
                          None if bias is None else bias.astype(np.float64))
    assert (got["experts"] == ref.experts).all()  # random fp32 logits: no near-ties at this size (seeded)
    assert np.abs(got["weights"] - ref.weights).max() < 1e-6 * max(1.0, cfg.scaling)
    check_plan(got, cfg)
    probs = ref.scores / ref.scores.sum(axis=1, keepdims=True)
    assert np.allclose(got["mean_prob"], probs.mean(axis=0), rtol=1e-5, atol=1e-8)
    assert got["losses"][0] == pytest.approx(ref.aux_loss, rel=1e-5)
    assert got["losses"][1] == pytest.approx(ref.z_loss, rel=1e-5)


@pytest.mark.parametrize("score", ["softmax", "sigmoid"])
@pytest.mark.parametrize("groups", [0, 8])
@pytest.mark.parametrize("top_k", [6, 12])  # route.h's eight slots, and its sixteen
def test_exact_ties_take_the_lower_index(route_host, score, groups, top_k):
    cfg = MoEConfig(experts=64, top_k=top_k, hidden=64, intermediate=64, score=score, groups=groups,
                    topk_groups=3 if groups else 0)
    rng = np.random.default_rng([3, groups, top_k])
    logits = padded_logits(rng, 700, 64, rng.integers(-2, 3, size=(700, 64)) * 0.5)
    got = host_route(route_host, cfg, logits)
    assert (got["experts"] == reference.route(logits[:, :64].astype(np.float64), cfg).experts).all()
    check_plan(got, cfg)


@pytest.mark.parametrize("groups", [0, 8])
def test_a_nan_choice_ranks_as_minus_infinity(route_host, groups):
    # route.h's TopN takes ordered values only: a NaN choice (a NaN logit under sigmoid) is -inf
    # there and in the reference; k distinct experts still come out, however many NaNs a row has
    cfg = MoEConfig(experts=64, top_k=6, hidden=64, intermediate=64, score="sigmoid", groups=groups,
                    topk_groups=3 if groups else 0)
    rng = np.random.default_rng([5, groups])
    values = rng.standard_normal((300, 64)) * 2
    values[rng.random((300, 64)) < 0.3] = np.nan
    values[7] = np.nan  # every expert of a row
    values[8, 6:] = np.nan  # all but the first six
    logits = padded_logits(rng, 300, 64, values)
    got = host_route(route_host, cfg, logits)
    assert (got["experts"] == reference.route(logits[:, :64].astype(np.float64), cfg).experts).all()
    assert all(len(set(row)) == cfg.top_k for row in got["experts"].tolist())
    check_plan(got, cfg)


def test_a_nan_group_score_ranks_as_minus_infinity(route_host):
    # a group whose two best are +inf (an infinite bias) and -inf (NaN choices) scores NaN: TopN
    # ranks that as -inf too, so the group order stays total and k distinct experts come out
    cfg = MoEConfig(experts=64, top_k=6, hidden=64, intermediate=64, score="sigmoid", groups=8, topk_groups=3,
                    expert_bias=True)
    rng = np.random.default_rng(6)
    bias = (rng.standard_normal(64) * 0.05).astype(np.float32)
    bias[[0, 24]] = np.inf
    values = rng.standard_normal((200, 64)) * 2
    values[::2, 1:8] = np.nan  # group 0: +inf and seven NaNs, every other row
    values[::3, 25:32] = np.nan  # group 3 alike, every third row
    logits = padded_logits(rng, 200, 64, values)
    got = host_route(route_host, cfg, logits, bias)
    ref = reference.route(logits[:, :64].astype(np.float64), cfg, bias.astype(np.float64))
    assert (got["experts"] == ref.experts).all()
    assert all(len(set(row)) == cfg.top_k for row in got["experts"].tolist())
    check_plan(got, cfg)


def test_one_expert_takes_every_token_and_tiny_batches(route_host):
    cfg = load_models()["Qwen3-30B-A3B"]
    rng = np.random.default_rng(9)
    logits = padded_logits(rng, 97, cfg.experts)
    logits[:, 5] = 50.0
    got = host_route(route_host, cfg, logits)
    assert (got["experts"][:, 0] == 5).all() and np.diff(got["start"])[5] == 97
    check_plan(got, cfg)
    one = host_route(route_host, cfg, padded_logits(rng, 1, cfg.experts))
    check_plan(one, cfg)


@pytest.mark.parametrize("lanes,ctas", [(1, 1), (7, 3), (64, 40), (300, 200)])
@pytest.mark.parametrize("kind", ["random", "ties", "hot", "few"])
def test_token_dropping_keeps_each_experts_highest_weights(route_host, kind, lanes, ctas):
    """The keep rule (capacity.h) against reference.capacity_keep on the harness's own routing:
    random logits; coarse ones (many equal weights: the lower pair index is kept); every token's
    first choice on one expert (thousands of rows over one CTA's lanes); few experts and tokens
    (more CTAs than experts, more lanes than an expert's rows). The kept plan is the stable
    dispatch order of the kept pairs, -1 past them, slot -1 for a dropped pair. Any lane and CTA
    count gives the same result."""
    if kind == "few":
        cfg = MoEConfig(experts=8, top_k=2, hidden=64, intermediate=64, capacity_factor=0.9)
    else:
        cfg = dataclasses.replace(load_models()["Qwen3-30B-A3B"], aux_loss_coef=0.01,
                                  capacity_factor={"random": 1.0, "ties": 0.5, "hot": 1.25}[kind])
    rng = np.random.default_rng([13, lanes])
    t = 97 if kind == "few" else 3001
    logits = padded_logits(rng, t, cfg.experts)
    if kind == "ties":
        logits[:, :cfg.experts] = np.round(logits[:, :cfg.experts])
        logits[:, 3] += 2.0
    if kind == "hot":
        logits[:, 5] = 50.0
    got = host_route(route_host, cfg, logits, lanes=lanes, ctas=ctas)
    kept, experts = got["kept"], got["experts"]
    want = reference.capacity_keep(experts.astype(np.int64), got["weights"].astype(np.float64), cfg)
    assert (kept == want).all() and not kept.all()
    n = int(kept.sum())
    flat = np.where(kept.ravel(), experts.ravel(), cfg.experts)  # dropped pairs sort past every expert
    order = np.argsort(flat, kind="stable")[:n]
    assert (got["order"][:n] == order).all() and (got["order"][n:] == -1).all()
    counts = np.bincount(experts.ravel()[kept.ravel()], minlength=cfg.experts)
    assert (got["start"] == np.concatenate([[0], np.cumsum(counts)])).all()
    assert counts.max() <= cfg.capacity_of(t) and (kind != "hot" or counts[5] == cfg.capacity_of(t))
    assert (got["slot"][order] == np.arange(n)).all() and (got["slot"][~kept.ravel()] == -1).all()


def test_router_splits_fill_the_grid_without_empty_ranges() -> None:
    """kosmos.moe.route.router_splits: the fused forward's and the device path's router GEMM K split
    (one factor for both: the same bits; a constant grid, so never the machine's). The EP-8 shares of
    the bench, bounds, and no empty K-range anywhere (gemm.check_split_k's rule)."""
    from kosmos.moe.route import ROUTER_MAX_SPLITS, ROUTER_MIN_SLABS, ROUTER_SPLIT_UNITS, router_splits

    # (tokens, columns, hidden) -> splits: DeepSeek-V3 256 / 2,048 rows per expert, Qwen3-30B the same
    assert router_splits(1024, 256, 7168) == 16
    assert router_splits(8192, 256, 7168) == 2
    assert router_splits(512, 128, 2048) == 8
    assert router_splits(4096, 128, 2048) == 4
    assert router_splits(0, 256, 7168) == 1
    assert router_splits(65536, 256, 7168) == 1   # 512 tiles: more than a grid already
    assert router_splits(100, 64, 128) == 1       # 2 slabs: nothing to split
    for tokens in (1, 127, 128, 129, 1000, 5000):
        for hidden in (64, 256, 960, 2048, 7168):
            s = router_splits(tokens, 256, hidden)
            slabs = -(-hidden // 64)
            per = -(-slabs // s)
            assert 1 <= s <= ROUTER_MAX_SPLITS and (s == 1 or per >= ROUTER_MIN_SLABS)
            assert (s - 1) * per < slabs, (tokens, hidden, s)
            assert s == 1 or s * -(-tokens // 128) <= ROUTER_SPLIT_UNITS
