"""GPU tests of kosmos.moe.route: the device router and dispatch plan against the float64 reference.

The same code is checked on the CPU (tests/test_moe_route_host.py); here it runs as the four
kernels. Decisions must equal kosmos.moe.reference.route's, except on tokens where the reference's own
candidates are within fp32 rounding of each other (then the device's choice must be as good, to
1e-5); weights within 1e-5 relative of float64 on the device's experts; the plan bitwise equal to
reference.dispatch_order of the device's experts; reruns bitwise equal. Logit columns past E hold NaN
and must never be read.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from kosmos.moe import MoEConfig, load_models, reference  # noqa: E402
from kosmos.moe.route import route  # noqa: E402

MODELS = load_models()


def choice64(logits, cfg, bias):
    """The reference's choice values (scores + bias), with group-limited experts at -inf; and scores."""
    r = reference.route(logits, cfg, bias)
    choice = r.scores + (bias if bias is not None else 0.0)
    if cfg.groups and cfg.topk_groups < cfg.groups:
        t, per = logits.shape[0], cfg.experts // cfg.groups
        g = np.sort(choice.reshape(t, cfg.groups, per), axis=2)[:, :, -2:].sum(axis=2)
        keep = np.argsort(-g, axis=1, kind="stable")[:, :cfg.topk_groups]
        allowed = np.zeros((t, cfg.groups), bool)
        np.put_along_axis(allowed, keep, True, axis=1)
        choice = np.where(np.repeat(allowed, per, axis=1), choice, -np.inf)
    return r, choice


def group_near_tie(ref, cfg, logits_row, bias) -> bool:
    """Group-limited: are the topk_groups-th and next group scores within fp32 rounding (1e-5)?"""
    if not (cfg.groups and cfg.topk_groups < cfg.groups):
        return False
    r1 = reference.route(logits_row[None, :], cfg, bias)
    c = r1.scores[0] + (bias if bias is not None else 0.0)
    g = np.sort(np.sort(c.reshape(cfg.groups, -1), axis=1)[:, -2:].sum(axis=1))[::-1]
    return bool(abs(g[cfg.topk_groups - 1] - g[cfg.topk_groups]) <= 1e-5 * max(1.0, abs(g[0])))


def run(cfg, logits, bias=None):
    """Route on the device; return host copies of everything, checked for a bitwise rerun."""
    lg = cupy.asarray(logits)
    b = None if bias is None else cupy.asarray(bias.astype(np.float32))
    outs = []
    for _ in range(2):
        r = route(lg, cfg, b)
        outs.append({f: cupy.asnumpy(getattr(r, f)) for f in ("experts", "weights", "order", "slot", "start", "losses")})
    for f in outs[0]:
        assert outs[0][f].tobytes() == outs[1][f].tobytes(), f"{f} differs between two runs"
    return outs[0]


def check(cfg, logits32, bias=None, *, exact=False):
    e = cfg.experts
    got = run(cfg, logits32, bias)
    lg64 = logits32[:, :e].astype(np.float64)
    b64 = None if bias is None else bias.astype(np.float32).astype(np.float64)
    ref, choice = choice64(lg64, cfg, b64)
    t = logits32.shape[0]
    ex = got["experts"]
    assert ex.shape == (t, cfg.top_k) and ((ex >= 0) & (ex < e)).all()
    differ = np.flatnonzero((ex != ref.experts).any(axis=1))
    if exact:
        assert differ.size == 0, f"tokens {differ[:8]} routed differently"
    else:
        assert differ.size <= max(1, t // 100), f"{differ.size} of {t} tokens routed differently"
        for tok in differ:  # only near-ties: the device's picks are as good as the reference's
            if group_near_tie(ref, cfg, lg64[tok], b64):
                continue  # the allowed groups themselves were a near-tie: any of them is right
            mine = np.take(choice[tok], ex[tok])
            theirs = np.take(choice[tok], ref.experts[tok])
            assert np.isfinite(mine).all() and np.allclose(mine, theirs, rtol=1e-5, atol=1e-6), tok
    # weights on the device's own experts, in float64
    w = np.take_along_axis(ref.scores, ex.astype(np.int64), axis=1)
    if cfg.normalize:
        w = w / w.sum(axis=1, keepdims=True)
    w *= cfg.scaling
    assert np.abs(got["weights"] - w).max() <= 1e-5 * max(1.0, np.abs(w).max())
    # the plan: exactly the stable counting sort of the device's experts
    order, counts = reference.dispatch_order(ex, e)
    assert (got["order"] == order).all()
    assert (got["start"] == np.concatenate([[0], np.cumsum(counts)])).all()
    assert (got["slot"][got["order"]] == np.arange(t * cfg.top_k)).all()
    if cfg.aux_loss_coef or cfg.z_loss_coef:  # on exactly the reference's routing (no near-tie here)
        if differ.size == 0:
            assert got["losses"][0] == pytest.approx(ref.aux_loss, rel=1e-5, abs=1e-9)
        assert got["losses"][1] == pytest.approx(ref.z_loss, rel=1e-5, abs=1e-9)
    else:
        assert (got["losses"] == 0).all()
    return got


def logits_for(rng, t, e, scale=2.0):
    pad = -(-e // 64) * 64 + 64  # the padded router GEMM's columns; the extra ones are NaN
    lg = np.full((t, pad), np.nan, np.float32)
    lg[:, :e] = (rng.standard_normal((t, e)) * scale).astype(np.float32)
    return lg


@pytest.mark.parametrize("name", sorted(MODELS))
def test_route_matches_the_reference(name):
    cfg = dataclasses.replace(MODELS[name], aux_loss_coef=0.01, z_loss_coef=0.001)
    rng = np.random.default_rng([7, cfg.experts, cfg.top_k])
    bias = (rng.standard_normal(cfg.experts) * 0.05).astype(np.float32) if cfg.expert_bias else None
    lg = logits_for(rng, 1029, cfg.experts)  # odd: a partial chunk and a partial block
    got = check(cfg, lg, bias)
    # columns past E are never read: NaN there (above) or zeros, the same bits
    lg[:, cfg.experts:] = 0.0
    again = run(cfg, lg, bias)
    for f in got:
        assert got[f].tobytes() == again[f].tobytes(), f


def test_route_honours_the_stream_argument():
    """route(..., stream=s) on a non-blocking stream: the same results once s is synchronized."""
    cfg = MODELS["Qwen3-30B-A3B"]
    rng = np.random.default_rng(4)
    lg = cupy.asarray(logits_for(rng, 515, cfg.experts))
    ref = run(cfg, cupy.asnumpy(lg))
    s = cupy.cuda.Stream(non_blocking=True)
    r = route(lg, cfg, stream=s)
    s.synchronize()
    assert cupy.asnumpy(r.experts).tobytes() == ref["experts"].tobytes()
    assert cupy.asnumpy(r.order).tobytes() == ref["order"].tobytes()


@pytest.mark.parametrize("score", ["softmax", "sigmoid"])
@pytest.mark.parametrize("groups", [0, 8])
def test_exact_ties_take_the_lower_index(score, groups):
    """Coarse logits: many exactly equal scores (and group scores); the tie rule decides, exactly."""
    cfg = MoEConfig(experts=64, top_k=6, hidden=64, intermediate=64, score=score, groups=groups,
                    topk_groups=3 if groups else 0)
    rng = np.random.default_rng([3, groups])
    lg = np.full((700, 128), np.nan, np.float32)
    lg[:, :64] = rng.integers(-2, 3, size=(700, 64)).astype(np.float32) * 0.5
    check(cfg, lg, exact=True)


def test_skewed_routing_one_expert_takes_every_token():
    cfg = dataclasses.replace(MODELS["Qwen3-30B-A3B"])
    rng = np.random.default_rng(9)
    lg = logits_for(rng, 4099, cfg.experts)
    lg[:, 5] = 50.0  # everybody's first choice
    got = check(cfg, lg)
    assert (got["experts"][:, 0] == 5).all()
    counts = np.diff(got["start"])
    assert counts[5] == 4099 and counts.sum() == 4099 * cfg.top_k


def test_few_tokens_and_none():
    cfg = MODELS["Mixtral-8x7B"]
    rng = np.random.default_rng(2)
    check(cfg, logits_for(rng, 1, cfg.experts))
    r = route(cupy.empty((0, 64), np.float32), cfg)
    assert r.experts.shape == (0, 2) and int(r.start[-1]) == 0 and r.order.size == 0


def test_bad_inputs_are_refused():
    cfg = MODELS["DeepSeek-V3"]
    lg = cupy.zeros((4, 256), np.float32)
    with pytest.raises(ValueError, match="bias"):
        route(lg, cfg)  # expert_bias without a bias
    with pytest.raises(TypeError):
        route(lg.astype(np.float16), cfg, cupy.zeros(256, np.float32))
    with pytest.raises(ValueError, match="L >= 256"):
        route(cupy.zeros((4, 128), np.float32), cfg, cupy.zeros(256, np.float32))
    with pytest.raises(ValueError, match="bias must be"):
        route(lg, cfg, cupy.zeros(255, np.float32))
    with pytest.raises(ValueError, match="expert_bias = False"):
        route(lg, MODELS["Mixtral-8x7B"], cupy.zeros(8, np.float32))


def test_many_groups_without_a_limit_route_over_every_expert():
    """groups = 64 with topk_groups = 64 is no limit at all (a 32-bit group mask must not be involved)."""
    cfg = MoEConfig(experts=128, top_k=8, hidden=64, intermediate=64, groups=64, topk_groups=64)
    check(cfg, logits_for(np.random.default_rng(12), 333, 128))


@pytest.mark.parametrize("capacity_factor,kind,t", [(1.0, "", 1029), (0.5, "", 1029), (1.25, "coarse", 1029),
                                                    (0.3, "hot", 40013)])
def test_token_dropping_keeps_each_experts_highest_weights(capacity_factor, kind, t):
    """Under MoEConfig.capacity_factor the device's drop plan (kosmos_moe_keep) is
    reference.capacity_keep of its own experts and weights, exactly (coarse logits: many equal
    weights, the lower pair index wins; hot: every token's first choice is one expert, 40,013 rows
    over one CTA); the plan is the stable dispatch order of the kept pairs (-1 past them), slot -1
    for the dropped ones; the losses are the dropless routing's (the choices before dropping);
    reruns bitwise equal."""
    cfg = dataclasses.replace(MODELS["Qwen3-30B-A3B"], aux_loss_coef=0.01, capacity_factor=capacity_factor)
    rng = np.random.default_rng([11, int(4 * capacity_factor)])
    lg = logits_for(rng, t, cfg.experts)
    if kind == "coarse":
        lg[:, :cfg.experts] = np.round(lg[:, :cfg.experts])
    lg[:, 3] += 50.0 if kind == "hot" else 2.0  # expert 3 over capacity on most cases
    dev = cupy.asarray(lg)
    r = route(dev, cfg)
    r2 = route(dev, cfg)
    for f in ("experts", "weights", "order", "slot", "start", "losses", "kept"):
        assert cupy.asnumpy(getattr(r, f)).tobytes() == cupy.asnumpy(getattr(r2, f)).tobytes(), f
    experts, weights = cupy.asnumpy(r.experts), cupy.asnumpy(r.weights)
    kept = cupy.asnumpy(r.kept)
    want = reference.capacity_keep(experts.astype(np.int64), weights.astype(np.float64), cfg)
    assert (kept == want).all() and not kept.all()
    n = int(kept.sum())
    assert int(r.dropped) == kept.size - n
    flat = np.where(kept.ravel(), experts.ravel(), cfg.experts)  # dropped pairs sort past every expert
    order = np.argsort(flat, kind="stable")[:n]
    start, slot = cupy.asnumpy(r.start), cupy.asnumpy(r.slot)
    assert (cupy.asnumpy(r.order)[:n] == order).all() and (cupy.asnumpy(r.order)[n:] == -1).all()
    assert (np.diff(start) == np.bincount(experts.ravel()[kept.ravel()], minlength=cfg.experts)).all()
    assert (slot[order] == np.arange(n)).all() and (slot[~kept.ravel()] == -1).all()
    assert max(np.bincount(experts.ravel()[kept.ravel()], minlength=cfg.experts)) <= cfg.capacity_of(t)
    dropless = route(dev, dataclasses.replace(cfg, capacity_factor=0.0))
    assert cupy.asnumpy(dropless.losses).tobytes() == cupy.asnumpy(r.losses).tobytes()
    assert dropless.kept is None
