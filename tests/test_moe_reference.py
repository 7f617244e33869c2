"""The MoE configs and the float64 routing / layer reference (no GPU): hand-checked cases, ties,
group-limited routing against brute force, the stable dispatch order, the whole layer on cases whose
answer is known another way."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from kosmos.moe import MoEConfig, load_models
from kosmos.moe import reference as ref


def cfg(**kw):
    base = dict(experts=8, top_k=2, hidden=64, intermediate=64)
    base.update(kw)
    return MoEConfig(**base)


def test_shipped_models_load_and_check():
    models = load_models()
    assert {"DeepSeek-V3", "Kimi-K2", "Qwen3-235B-A22B", "Qwen3-30B-A3B", "Llama-4-Scout", "Mixtral-8x7B",
            "GPT-OSS-120B"} <= set(models)
    ds = models["DeepSeek-V3"]
    assert (ds.experts, ds.top_k, ds.groups, ds.topk_groups, ds.score, ds.expert_bias) == (256, 8, 8, 4, "sigmoid", True)
    assert ds.local_experts(8) == 32
    with pytest.raises(ValueError, match="do not divide"):
        ds.local_experts(3)


@pytest.mark.parametrize("kw,match", [
    (dict(top_k=9), "exceeds the 8 experts"),
    (dict(score="relu"), "score must be"),
    (dict(groups=3, topk_groups=1), "equal groups"),
    (dict(groups=4, topk_groups=5), "topk_groups must be"),
    (dict(groups=4, topk_groups=1, top_k=3), "exceeds the experts of 1 groups"),
    (dict(topk_groups=2), "needs groups"),
    (dict(hidden=100), "multiple of 64"),
    (dict(experts=0), "positive integer"),
    (dict(capacity_factor=-1.0), "capacity_factor"),
])
def test_bad_configs(kw, match):
    with pytest.raises(ValueError, match=match):
        cfg(**kw)


def test_softmax_top2_by_hand():
    logits = np.log(np.array([[1.0, 2.0, 3.0, 4.0, 0.5, 0.5, 0.5, 0.5]]))
    r = ref.route(logits, cfg(normalize=False))
    p = np.exp(logits) / np.exp(logits).sum()
    assert r.experts.tolist() == [[3, 2]]
    np.testing.assert_allclose(r.weights, [[p[0, 3], p[0, 2]]])
    r = ref.route(logits, cfg(normalize=True, scaling=2.0))
    np.testing.assert_allclose(r.weights, [[2 * 4 / 7, 2 * 3 / 7]])


def test_ties_take_the_lower_expert():
    r = ref.route(np.zeros((3, 8)), cfg(top_k=3))
    assert r.experts.tolist() == [[0, 1, 2]] * 3


def test_bias_changes_the_choice_not_the_weight():
    c = cfg(score="sigmoid", expert_bias=True, normalize=False, top_k=1)
    logits = np.array([[2.0, 1.0, 0, 0, 0, 0, 0, 0]])
    bias = np.zeros(8)
    bias[1] = 1.0
    r = ref.route(logits, c, bias)
    assert r.experts.tolist() == [[1]]
    np.testing.assert_allclose(r.weights, [[1 / (1 + np.exp(-1.0))]])
    with pytest.raises(ValueError, match="needs a bias"):
        ref.route(logits, c)
    with pytest.raises(ValueError, match="expert_bias = False"):
        ref.route(logits, cfg(), bias)


def test_group_limited_matches_brute_force():
    rng = np.random.default_rng(0)
    c = MoEConfig(experts=16, top_k=3, hidden=64, intermediate=64, score="sigmoid", expert_bias=True,
                  groups=4, topk_groups=2)
    logits, bias = rng.standard_normal((50, 16)), 0.1 * rng.standard_normal(16)
    r = ref.route(logits, c, bias)
    choice = 1 / (1 + np.exp(-logits)) + bias
    for t in range(50):
        g = choice[t].reshape(4, 4)
        gscore = np.sort(g, axis=1)[:, -2:].sum(axis=1)
        best_pair = max(itertools.combinations(range(4), 2), key=lambda p: (gscore[list(p)].sum(), [-i for i in p]))
        allowed = [e for e in range(16) if e // 4 in best_pair]
        want = sorted(allowed, key=lambda e: (-choice[t, e], e))[:3]
        assert r.experts[t].tolist() == want, t


def test_aux_and_z_loss():
    # Uniform scores and perfectly balanced choices: the load-balancing loss is exactly its coefficient.
    c = cfg(top_k=1, aux_loss_coef=0.01, z_loss_coef=0.001)
    logits = np.zeros((8, 8))
    r = ref.route(logits, c)
    assert r.experts.ravel().tolist() == [0] * 8  # ties: all to expert 0, so f = (1, 0, ...)
    np.testing.assert_allclose(r.aux_loss, 0.01 * 8 * (1.0 * 1 / 8))
    np.testing.assert_allclose(r.z_loss, 0.001 * np.log(8.0) ** 2)
    balanced = np.full((8, 8), -10.0)
    balanced[np.arange(8), np.arange(8)] = 10.0
    r = ref.route(balanced, c)
    assert sorted(r.experts.ravel().tolist()) == list(range(8))
    np.testing.assert_allclose(r.aux_loss, 0.01, rtol=1e-6)  # f = P = 1/E (P up to e^-20)


def test_dispatch_order_is_a_stable_counting_sort():
    experts = np.array([[2, 0], [0, 1], [2, 1]])
    order, counts = ref.dispatch_order(experts, 4)
    assert counts.tolist() == [2, 2, 2, 0]
    assert order.tolist() == [1, 2, 3, 5, 0, 4]  # (t0,j1) (t1,j0) | (t1,j1) (t2,j1) | (t0,j0) (t2,j0)


def test_forward_one_expert_is_the_dense_mlp_and_shared_adds():
    rng = np.random.default_rng(1)
    c = MoEConfig(experts=1, top_k=1, hidden=64, intermediate=64, normalize=True, scaling=1.0)
    x = rng.standard_normal((5, 64))
    rw, w1, w2 = rng.standard_normal((1, 64)), rng.standard_normal((1, 128, 64)), rng.standard_normal((1, 64, 64))
    y, r = ref.forward(x, rw, w1, w2, c)
    np.testing.assert_allclose(r.weights, 1.0)
    np.testing.assert_allclose(y, ref.expert_mlp(x, w1[0], w2[0]))
    cs = MoEConfig(experts=1, top_k=1, hidden=64, intermediate=64, shared=1)
    ys, _ = ref.forward(x, rw, w1, w2, cs, shared_w1=w1[0], shared_w2=w2[0])
    np.testing.assert_allclose(ys, 2 * y)
    with pytest.raises(ValueError, match="shared expert"):
        ref.forward(x, rw, w1, w2, cs)
    with pytest.raises(ValueError, match="shared expert"):  # the per-expert stack is not the MLP's layout
        ref.forward(x, rw, w1, w2, cs, shared_w1=w1, shared_w2=w2)


def test_shared_experts_are_one_mlp_of_their_summed_width():
    """S shared experts (gate g_s, up u_s, down d_s) sum to one SwiGLU MLP of width S Is whose w1
    stacks every gate, then every up, and whose w2 puts the downs side by side: the layout of
    MoEParams.shared_w1 / shared_w2."""
    rng = np.random.default_rng(2)
    h, i_s = 64, 64
    x = rng.standard_normal((6, h))
    g, u, d = (rng.standard_normal((2, i_s, h)), rng.standard_normal((2, i_s, h)), rng.standard_normal((2, h, i_s)))
    apart = sum(ref.expert_mlp(x, np.concatenate([g[s], u[s]]), d[s]) for s in range(2))
    one = ref.expert_mlp(x, np.concatenate([g[0], g[1], u[0], u[1]]), np.concatenate([d[0], d[1]], axis=1))
    np.testing.assert_allclose(one, apart, rtol=1e-12, atol=1e-12)
    c = MoEConfig(experts=2, top_k=1, hidden=h, intermediate=128, shared=2, shared_intermediate=i_s)
    assert c.shared_width == 2 * i_s


def test_forward_equals_a_per_token_loop():
    rng = np.random.default_rng(2)
    c = cfg(top_k=3, score="softmax", normalize=True)
    x, rw = rng.standard_normal((7, 64)), rng.standard_normal((8, 64))
    w1, w2 = rng.standard_normal((8, 128, 64)) / 8, rng.standard_normal((8, 64, 64)) / 8
    y, r = ref.forward(x, rw, w1, w2, c)
    for t in range(7):
        want = sum(r.weights[t, j] * ref.expert_mlp(x[t:t + 1], w1[e], w2[e])[0] for j, e in enumerate(r.experts[t]))
        np.testing.assert_allclose(y[t], want, rtol=1e-12, atol=1e-12)


def test_capacity_keeps_each_experts_highest_weights_per_rank():
    """capacity_keep against a loop: per rank segment and expert, the cap pairs of highest weight
    (the lower pair index first among equal weights) are kept; dropless configs keep everything."""
    rng = np.random.default_rng(4)
    c = cfg(top_k=3, capacity_factor=0.5)
    segments = [11, 0, 29, 5]
    experts = np.stack([rng.choice(8, 3, replace=False) for _ in range(sum(segments))])
    weights = np.round(rng.random(experts.shape), 1)  # coarse: many equal weights
    kept = ref.capacity_keep(experts, weights, c, segments)
    lo = 0
    for n in segments:
        cap = c.capacity_of(n)
        for e in range(8):
            pairs = [(-weights[t, j], (t - lo) * 3 + j) for t in range(lo, lo + n) for j in range(3) if experts[t, j] == e]
            want = {q for _, q in sorted(pairs)[:cap]}
            got = {(t - lo) * 3 + j for t in range(lo, lo + n) for j in range(3) if experts[t, j] == e and kept[t, j]}
            assert got == want, (n, e)
        lo += n
    assert not kept.all()
    assert ref.capacity_keep(experts, weights, cfg(top_k=3), segments).all()
    assert cfg().capacity_of(100) is None and cfg(capacity_factor=1.0).capacity_of(100) == 25


def test_forward_with_drops_equals_a_per_token_loop_over_the_kept_pairs():
    rng = np.random.default_rng(3)
    c = cfg(top_k=2, capacity_factor=0.7, shared=1)
    x, rw = rng.standard_normal((9, 64)), rng.standard_normal((8, 64))
    w1, w2 = rng.standard_normal((8, 128, 64)) / 8, rng.standard_normal((8, 64, 64)) / 8
    sw1, sw2 = rng.standard_normal((128, 64)) / 8, rng.standard_normal((64, 64)) / 8
    y, r = ref.forward(x, rw, w1, w2, c, None, sw1, sw2, rank_tokens=[4, 5])
    assert not r.kept.all()
    for t in range(9):
        want = ref.expert_mlp(x[t:t + 1], sw1, sw2)[0]
        want = want + sum(r.weights[t, j] * ref.expert_mlp(x[t:t + 1], w1[e], w2[e])[0]
                          for j, e in enumerate(r.experts[t]) if r.kept[t, j])
        np.testing.assert_allclose(y[t], want, rtol=1e-12, atol=1e-12)


# ---- the backward: analytic gradients against central finite differences (float64) ----
def _loss(x, wr, w1, w2, c, dy, bias, sw1, sw2):
    y, r = ref.forward(x, wr, w1, w2, c, bias, sw1, sw2)
    return float((y * dy).sum()) + r.aux_loss + r.z_loss


@pytest.mark.parametrize("kw", [
    dict(),                                                     # softmax, normalised
    dict(score="sigmoid", normalize=False, scaling=2.5),
    dict(score="sigmoid", expert_bias=True, groups=4, topk_groups=2, top_k=3, shared=1, shared_intermediate=64),
    dict(aux_loss_coef=0.3, z_loss_coef=0.2),
    dict(score="sigmoid", aux_loss_coef=0.5, shared=2),
    dict(capacity_factor=0.6, aux_loss_coef=0.1),               # drops: each expert keeps 2 of 7 x 2 pairs
])
def test_backward_matches_finite_differences(kw):
    c = cfg(**kw)
    rng = np.random.default_rng(len(repr(kw)))
    t, h, i, e = 7, c.hidden, c.intermediate, c.experts
    x = rng.standard_normal((t, h))
    wr = rng.standard_normal((e, h)) * 0.3
    w1 = rng.standard_normal((e, 2 * i, h)) * 0.15
    w2 = rng.standard_normal((e, h, i)) * 0.15
    bias = rng.standard_normal(e) * 0.1 if c.expert_bias else None
    sw1 = rng.standard_normal((2 * c.shared_width, h)) * 0.15 if c.shared else None
    sw2 = rng.standard_normal((h, c.shared_width)) * 0.15 if c.shared else None
    dy = rng.standard_normal((t, h))
    g = ref.backward(x, wr, w1, w2, c, dy, bias, sw1, sw2)
    params = {"x": (x, g.dx), "wr": (wr, g.d_router_w), "w1": (w1, g.dw1), "w2": (w2, g.dw2)}
    if c.shared:
        params.update(sw1=(sw1, g.d_shared_w1), sw2=(sw2, g.d_shared_w2))
    eps = 1e-6
    for name, (value, grad) in params.items():
        v = rng.standard_normal(value.shape)  # a random direction: the directional derivative

        def at(step):
            args = dict(x=x, wr=wr, w1=w1, w2=w2, sw1=sw1, sw2=sw2)
            args[name] = value + step * v
            return _loss(args["x"], args["wr"], args["w1"], args["w2"], c, dy, bias, args["sw1"], args["sw2"])

        fd = (at(eps) - at(-eps)) / (2 * eps)
        assert ref.route(x @ wr.T, c, bias).experts.tolist() == \
            ref.route((x + eps * v if name == "x" else x) @ (wr + eps * v if name == "wr" else wr).T, c,
                      bias).experts.tolist(), "the step changed the routing: pick another seed"
        assert abs(fd - float((grad * v).sum())) <= 1e-6 * max(1.0, abs(fd)), (name, fd, float((grad * v).sum()))


def test_backward_of_a_token_alone_is_its_own():
    """Gradients are per token except the router's losses: with no loss terms, token t's dx depends on
    dy[t] only (dy of the others zeroed leaves it unchanged)."""
    c = cfg()
    rng = np.random.default_rng(3)
    x, wr = rng.standard_normal((5, 64)), rng.standard_normal((8, 64)) * 0.3
    w1, w2 = rng.standard_normal((8, 128, 64)) * 0.1, rng.standard_normal((8, 64, 64)) * 0.1
    dy = rng.standard_normal((5, 64))
    full = ref.backward(x, wr, w1, w2, c, dy)
    only = dy.copy()
    only[1:] = 0
    one = ref.backward(x, wr, w1, w2, c, only)
    np.testing.assert_allclose(one.dx[0], full.dx[0], rtol=1e-12, atol=1e-12)
    assert np.abs(one.dx[1:]).max() == 0
