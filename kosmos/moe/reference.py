"""Float64 NumPy reference of the MoE layer: routing, the dispatch order, the whole forward, and its
analytic backward (every gradient, router losses included; checked against finite differences).

The device kernels must reproduce these decisions exactly (which experts, in which order) and the
values within tolerance. Tie rules (deterministic, and the kernels follow them): among equal scores
the lower expert index wins; among equal group scores the lower group index wins.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import MoEConfig


@dataclass(frozen=True)
class Routing:
    experts: np.ndarray   # [T, k] int64: chosen experts, best first
    weights: np.ndarray   # [T, k] float64: their combine weights
    scores: np.ndarray    # [T, E] float64: the score function's output (without the bias)
    aux_loss: float       # cfg.aux_loss_coef * load-balancing loss (0.0 when the coefficient is 0)
    z_loss: float         # cfg.z_loss_coef * mean(logsumexp(logits)^2)
    kept: np.ndarray      # [T, k] bool: the pair is dispatched (False: dropped past its capacity)


def _top(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest of each row, best first, the lower index first among equals."""
    return np.argsort(-values, axis=-1, kind="stable")[..., :k]


def capacity_keep(experts: np.ndarray, weights: np.ndarray, cfg: MoEConfig,
                  rank_tokens: list[int] | None = None) -> np.ndarray:
    """[T, k] bool: the pairs MoEConfig.capacity_of keeps, per rank (`rank_tokens`: the tokens of
    each rank, in order, when the batch is several ranks' concatenated; default: one rank): per
    expert, its pairs by combine weight, highest first, the lower pair index first among equals."""
    t, k = experts.shape
    kept = np.ones((t, k), dtype=bool)
    lo = 0
    for n in (rank_tokens if rank_tokens is not None else [t]):
        cap = cfg.capacity_of(n)
        if cap is not None:
            e, w = experts[lo:lo + n].ravel(), weights[lo:lo + n].ravel()
            srt = np.lexsort((np.arange(e.size), -w, e))  # expert, then weight desc, then pair
            first = np.searchsorted(e[srt], np.arange(cfg.experts))  # each expert's first sorted pair
            pos = np.arange(e.size) - first[e[srt]]
            mine = np.empty(e.size, dtype=bool)
            mine[srt] = pos < cap
            kept[lo:lo + n] = mine.reshape(n, k)
        lo += n
    return kept


def route(logits: np.ndarray, cfg: MoEConfig, bias: np.ndarray | None = None,
          experts: np.ndarray | None = None, kept: np.ndarray | None = None,
          rank_tokens: list[int] | None = None) -> Routing:
    """Route tokens from router logits [T, E] (float64 math whatever comes in). `experts` [T, k]: take
    this choice instead of making it (to compare with a device routing that broke a near-tie the
    other way); everything else follows from it; `kept` likewise for the capacity's drops (default:
    capacity_keep over `rank_tokens`)."""
    logits = np.asarray(logits, dtype=np.float64)
    if logits.ndim != 2 or logits.shape[1] != cfg.experts:
        raise ValueError(f"logits must be [tokens, {cfg.experts}], got {logits.shape}")
    if cfg.score == "softmax":
        z = np.exp(logits - logits.max(axis=1, keepdims=True))
        scores = z / z.sum(axis=1, keepdims=True)
    else:
        scores = 1.0 / (1.0 + np.exp(-logits))
    choice = scores
    if cfg.expert_bias:
        if bias is None or np.shape(bias) != (cfg.experts,):
            raise ValueError(f"expert_bias needs a bias of shape ({cfg.experts},)")
        choice = scores + np.asarray(bias, dtype=np.float64)
    elif bias is not None:
        raise ValueError("a bias was given but the config has expert_bias = False")
    choice = np.where(np.isnan(choice), -np.inf, choice)  # a NaN ranks as -inf (route.h's TopN alike)
    if cfg.groups and cfg.topk_groups < cfg.groups:
        t = logits.shape[0]
        per = cfg.experts // cfg.groups
        grouped = choice.reshape(t, cfg.groups, per)
        best2 = np.sort(grouped, axis=2)[:, :, ::-1][:, :, :2]
        with np.errstate(invalid="ignore"):  # +inf + -inf: NaN, ranked as -inf
            group_score = best2.sum(axis=2)
        group_score = np.where(np.isnan(group_score), -np.inf, group_score)
        keep = _top(group_score, cfg.topk_groups)
        allowed = np.zeros((t, cfg.groups), dtype=bool)
        np.put_along_axis(allowed, keep, True, axis=1)
        choice = np.where(np.repeat(allowed, per, axis=1), choice, -np.inf)
    experts = _top(choice, cfg.top_k) if experts is None else np.asarray(experts, dtype=np.int64)
    weights = np.take_along_axis(scores, experts, axis=1)
    if cfg.normalize:
        weights = weights / weights.sum(axis=1, keepdims=True)
    weights = weights * cfg.scaling
    aux = 0.0
    if cfg.aux_loss_coef:
        t, k = experts.shape
        frac = np.bincount(experts.ravel(), minlength=cfg.experts) / (t * k)
        probs = scores / scores.sum(axis=1, keepdims=True)  # softmax already sums to 1
        aux = cfg.aux_loss_coef * cfg.experts * float(np.dot(frac, probs.mean(axis=0)))
    zl = 0.0
    if cfg.z_loss_coef:
        m = logits.max(axis=1)
        lse = m + np.log(np.exp(logits - m[:, None]).sum(axis=1))
        zl = cfg.z_loss_coef * float(np.mean(lse**2))
    if kept is None:
        kept = capacity_keep(experts, weights, cfg, rank_tokens)
    return Routing(experts, weights, scores, aux, zl, np.asarray(kept, dtype=bool))


def dispatch_order(experts: np.ndarray, num_experts: int) -> tuple[np.ndarray, np.ndarray]:
    """The stable counting sort of (token, j) pairs by expert: (order, counts).

    order[i] = token * k + j of the i-th row sent, expert-major, then token, then j; counts[e] =
    rows for expert e. This row order fixes the wgrad's accumulation order (bitwise reproducible)."""
    flat = np.asarray(experts).ravel()
    return np.argsort(flat, kind="stable"), np.bincount(flat, minlength=num_experts)


def silu(xp, x):
    """x * sigmoid(x), numpy or cupy (`xp`)."""
    return x / (1.0 + xp.exp(-x))



def expert_mlp(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    """SwiGLU expert: w1 [2I, H] holds gate rows then up rows, w2 [H, I]; x [T, H] -> [T, H]."""
    i = w1.shape[0] // 2
    h = x @ w1.T
    return (silu(np, h[:, :i]) * h[:, i:]) @ w2.T


def forward(x: np.ndarray, router_w: np.ndarray, w1: np.ndarray, w2: np.ndarray, cfg: MoEConfig,
            bias: np.ndarray | None = None, shared_w1: np.ndarray | None = None,
            shared_w2: np.ndarray | None = None, rank_tokens: list[int] | None = None) -> tuple[np.ndarray, Routing]:
    """The whole layer in float64: y = sum over the kept pairs j of w_j * expert_{e_j}(x) (+ the
    shared experts' output).

    x [T, H]; router_w [E, H]; w1 [E, 2I, H]; w2 [E, H, I]; shared_w1 [2 Fs, H], shared_w2 [H, Fs]
    (the shared experts as one MLP, Fs = cfg.shared_width);
    rank_tokens: see capacity_keep (token dropping is per rank)."""
    x = np.asarray(x, dtype=np.float64)
    r = route(x @ np.asarray(router_w, dtype=np.float64).T, cfg, bias, rank_tokens=rank_tokens)
    y = np.zeros_like(x)
    order, counts = dispatch_order(r.experts, cfg.experts)
    start = 0
    for e in range(cfg.experts):
        rows = order[start:start + counts[e]]
        start += counts[e]
        rows = rows[r.kept.ravel()[rows]]
        if rows.size == 0:
            continue
        tok, j = rows // cfg.top_k, rows % cfg.top_k
        out = expert_mlp(x[tok], np.asarray(w1[e], np.float64), np.asarray(w2[e], np.float64))
        np.add.at(y, tok, r.weights[tok, j][:, None] * out)
    if cfg.shared:
        want = ((2 * cfg.shared_width, x.shape[1]), (x.shape[1], cfg.shared_width))
        if shared_w1 is None or shared_w2 is None or (np.shape(shared_w1), np.shape(shared_w2)) != want:
            raise ValueError(f"the config has {cfg.shared} shared expert(s): pass shared_w1 {want[0]} and "
                             f"shared_w2 {want[1]}")
        y += expert_mlp(x, np.asarray(shared_w1, np.float64), np.asarray(shared_w2, np.float64))
    return y, r


# ---------------------------------------------------------------- the backward (issue 13's oracle)
@dataclass(frozen=True)
class Gradients:
    """d(loss)/d(everything trained), loss = sum(dy * y) + aux_loss + z_loss (float64)."""
    dx: np.ndarray                      # [T, H]
    d_router_w: np.ndarray              # [E, H]
    dw1: np.ndarray                     # [E, 2I, H]
    dw2: np.ndarray                     # [E, H, I]
    d_shared_w1: np.ndarray | None = None  # [2 Fs, H]
    d_shared_w2: np.ndarray | None = None  # [H, Fs]


def swiglu_backward(xp, pre, d_a):
    """d [gate, up] [rows, 2I] of a = silu(gate) * up from d a [rows, I]; pre = [gate, up]. `xp` is
    numpy or cupy: the layer's device backward runs this same code (finite-difference checked here)."""
    i = pre.shape[1] // 2
    g, u = pre[:, :i], pre[:, i:]
    sg = 1.0 / (1.0 + xp.exp(-g))
    return xp.concatenate([d_a * u * sg * (1.0 + g * (1.0 - sg)), d_a * g * sg], axis=1)  # silu' = s(1 + g(1 - s))


def _expert_backward(x: np.ndarray, w1: np.ndarray, w2: np.ndarray, d_out: np.ndarray):
    """(dx, dw1, dw2, out) of out = expert_mlp(x, w1, w2) for the output gradient d_out."""
    i = w1.shape[0] // 2
    h = x @ w1.T
    a = silu(np, h[:, :i]) * h[:, i:]
    d_h = swiglu_backward(np, h, d_out @ w2)          # [T, 2I]
    return d_h @ w1, d_h.T @ x, d_out.T @ a, a @ w2.T


def router_logit_grads(xp, logits, experts, d_weights, cfg: MoEConfig):
    """d(loss)/d(logits) [T, E] from the combine weights' gradients d_weights [T, k] (the chosen
    `experts` [T, k]) and the router's own losses: through the normalisation and scaling, the score
    function, the aux loss (over these T tokens) and the z-loss. `xp` is numpy or cupy. Checked by
    finite differences (tests/test_moe_reference.py); the layer's kernel (kosmos.moe.layer
    router_backward) is checked against it (tests/gpu/test_moe_layer.py)."""
    t, k, e_num = logits.shape[0], cfg.top_k, cfg.experts
    if cfg.score == "softmax":
        z = xp.exp(logits - logits.max(axis=1, keepdims=True))
        scores = z / z.sum(axis=1, keepdims=True)
    else:
        scores = 1.0 / (1.0 + xp.exp(-logits))
    u = xp.take_along_axis(scores, experts, axis=1)  # w_j = c u_j / sum_i u_i (normalize) or c u_j
    if cfg.normalize:
        us = u.sum(axis=1, keepdims=True)
        d_u = cfg.scaling / us * (d_weights - (d_weights * u).sum(axis=1, keepdims=True) / us)
    else:
        d_u = cfg.scaling * d_weights
    d_scores = xp.zeros_like(scores)
    xp.put_along_axis(d_scores, experts, d_u, axis=1)  # the k experts of a token are distinct
    if cfg.aux_loss_coef:  # aux = coef * E * sum_e f_e mean_t p_te, p = scores / rowsum, f constant
        frac = xp.bincount(experts.ravel(), minlength=e_num) / (t * k)
        rows = scores.sum(axis=1, keepdims=True)
        d_p = xp.broadcast_to(cfg.aux_loss_coef * e_num * frac / t, scores.shape)
        d_scores += (d_p - (d_p * (scores / rows)).sum(axis=1, keepdims=True)) / rows
    if cfg.score == "softmax":
        d_logits = scores * (d_scores - (d_scores * scores).sum(axis=1, keepdims=True))
    else:
        d_logits = d_scores * scores * (1.0 - scores)
    if cfg.z_loss_coef:  # z = coef * mean_t lse_t^2
        m = logits.max(axis=1, keepdims=True)
        z = xp.exp(logits - m)
        lse = m + xp.log(z.sum(axis=1, keepdims=True))
        d_logits += cfg.z_loss_coef * 2.0 * lse / t * (z / z.sum(axis=1, keepdims=True))
    return d_logits


def backward(x: np.ndarray, router_w: np.ndarray, w1: np.ndarray, w2: np.ndarray, cfg: MoEConfig, dy: np.ndarray,
             bias: np.ndarray | None = None, shared_w1: np.ndarray | None = None,
             shared_w2: np.ndarray | None = None, experts: np.ndarray | None = None,
             kept: np.ndarray | None = None) -> Gradients:
    """Analytic gradients of the layer of `forward`, in float64. The routing choice (top-k, group
    limit) is piecewise constant: gradients reach the router through the chosen experts' weights,
    the aux loss and the z-loss; the expert bias (a choice-only offset, trained by a rule, not by
    gradients) gets none. `experts`, `kept`: a given choice and drops (see route); a dropped pair
    contributes nothing, so its weight's gradient is 0 (the kept weights still depend on it through
    the normalisation). x is one rank's tokens (capacity is per rank)."""
    x = np.asarray(x, dtype=np.float64)
    dy = np.asarray(dy, dtype=np.float64)
    wr = np.asarray(router_w, dtype=np.float64)
    t, k, e_num = x.shape[0], cfg.top_k, cfg.experts
    logits = x @ wr.T
    r = route(logits, cfg, bias, experts, kept)
    dx = np.zeros_like(x)
    dw1 = np.zeros(np.shape(w1), np.float64)
    dw2 = np.zeros(np.shape(w2), np.float64)
    d_weights = np.zeros((t, k))
    for e in range(e_num):
        tok, j = np.nonzero((r.experts == e) & r.kept)
        if tok.size == 0:
            continue
        we = r.weights[tok, j][:, None]
        # out_e = expert(x[tok]); y[tok] += w * out_e, so d out_e = w * dy[tok], d w = dy . out_e
        out = expert_mlp(x[tok], np.asarray(w1[e], np.float64), np.asarray(w2[e], np.float64))
        d_weights[tok, j] = np.einsum("th,th->t", dy[tok], out)
        gx, g1, g2, _ = _expert_backward(x[tok], np.asarray(w1[e], np.float64), np.asarray(w2[e], np.float64),
                                         we * dy[tok])
        np.add.at(dx, tok, gx)
        dw1[e] += g1
        dw2[e] += g2
    d_logits = router_logit_grads(np, logits, r.experts, d_weights, cfg)
    dx += d_logits @ wr
    d_router_w = d_logits.T @ x
    d_sw1 = d_sw2 = None
    if cfg.shared:
        gx, d_sw1, d_sw2, _ = _expert_backward(x, np.asarray(shared_w1, np.float64),
                                               np.asarray(shared_w2, np.float64), dy)
        dx += gx
    return Gradients(dx, d_router_w, dw1, dw2, d_sw1, d_sw2)
