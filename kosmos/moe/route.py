"""MoE routing on the device: router logits in, each token's experts and weights and the dispatch
plan out, in four small launches (hipsrc/moe_route.hip: a thread per token, then a CTA per chunk of
32 tokens; the forward megakernel runs the same code).

    r = route(logits, cfg, bias=None)        # logits: float32 CuPy [T, L], L >= cfg.experts
    r.experts [T, k] int32 (best first), r.weights [T, k] float32,
    r.order [T*k] int32 (row -> t*k + j, expert-major; under token dropping there are fewer rows
    than pairs and the rows past start[E] hold -1), r.slot [T*k] (its inverse; -1 for a dropped pair),
    r.start [E + 1] int32 (expert e owns rows start[e]:start[e+1])
    r.losses [2] float32 (aux, z: reference.route's aux_loss and z_loss; zeros unless the config
    has a coefficient), r.mean_prob [E] float32 (each expert's normalised score averaged over the
    tokens: what the aux loss's backward needs), or None

The rule is kosmos.moe.reference.route's, in fp32: the decisions agree with the float64 reference
except where two candidates are within fp32 rounding of each other, and among exactly equal
values the lower expert (or group) index wins in both. Only the first E columns of `logits` are
read, so a router GEMM padded to the builder's 64-column tiles can be passed as it is. NaN or
infinite logits give unspecified (but in-range) choices. The plan is a stable counting sort without
atomics: identical on every run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrays import check_array
from ..runtime.mirror import StructMirror
from ..runtime.streams import uses_stream
from .config import MoEConfig

# RouteRule and the constants of hipsrc/kosmos/moe/route.h (checked at compile time: runtime.mirror).
ROUTE_RULE_DTYPE = np.dtype(
    [("experts", np.int32), ("top_k", np.int32), ("score", np.int32), ("groups", np.int32),
     ("topk_groups", np.int32), ("normalize", np.int32), ("scaling", np.float32), ("pad_", np.int32),
     ("bias", np.uint64)],
    align=True,
)
CONSTANTS = {"kMaxTopK": 16, "kMaxGroups": 16, "kChunk": 32, "SCORE_SOFTMAX": 0, "SCORE_SIGMOID": 1}
MIRRORS = [StructMirror("kosmos::moe::RouteRule", ROUTE_RULE_DTYPE)]
_THREADS = 128
_SCAN_THREADS = 512  # the scan's one CTA: a thread per expert (more experts: threads stride)


@dataclass(frozen=True)
class DeviceRouting:
    experts: Any  # [T, k] int32, best first
    weights: Any  # [T, k] float32
    order: Any    # [T * k] int32: order[row] = t * k + j, expert-major, then token, then j (row < start[E]; -1 past it)
    slot: Any     # [T * k] int32: slot[t * k + j] = its row, or -1 (dropped)
    start: Any    # [E + 1] int32: rows start[e]:start[e + 1] are expert e's
    losses: Any   # [2] float32: (aux, z), each already multiplied by its coefficient
    mean_prob: Any = None  # [E] float32 when a loss was computed
    kept: Any = None       # [T, k] bool under token dropping (MoEConfig.capacity_of), else None

    @property
    def counts(self) -> Any:
        """[E] int32: the rows dispatched to each expert (the kept pairs)."""
        return self.start[1:] - self.start[:-1]

    @property
    def dropped(self) -> Any:
        """int32 0-d device array: this rank's pairs dropped past their experts' capacity."""
        return self.experts.size - self.start[-1]


def check_routable(cfg: MoEConfig) -> None:
    """The limits of the device rule (route.h): top_k <= kMaxTopK, groups <= kMaxGroups."""
    if cfg.top_k > CONSTANTS["kMaxTopK"]:
        raise ValueError(f"top_k = {cfg.top_k}: the device router keeps at most {CONSTANTS['kMaxTopK']}")
    if cfg.groups and cfg.topk_groups < cfg.groups and cfg.groups > CONSTANTS["kMaxGroups"]:
        raise ValueError(f"groups = {cfg.groups}: group-limited routing takes at most {CONSTANTS['kMaxGroups']}")


def rule_record(cfg: MoEConfig, bias_ptr: int = 0) -> np.void:
    rec = np.zeros((), ROUTE_RULE_DTYPE)
    rec["experts"], rec["top_k"] = cfg.experts, cfg.top_k
    rec["score"] = CONSTANTS["SCORE_SOFTMAX"] if cfg.score == "softmax" else CONSTANTS["SCORE_SIGMOID"]
    limited = bool(cfg.groups) and cfg.topk_groups < cfg.groups  # else every expert competes: no groups
    rec["groups"], rec["topk_groups"] = (cfg.groups, cfg.topk_groups) if limited else (0, 0)
    rec["normalize"], rec["scaling"] = int(cfg.normalize), cfg.scaling
    rec["bias"] = bias_ptr
    return rec[()]


def plan_chunks(tokens: int) -> int:
    return -(-tokens // CONSTANTS["kChunk"])


def _module():
    from ..runtime.module import load_module

    return load_module("moe_route.hip")


@uses_stream
def route(logits: Any, cfg: MoEConfig, bias: Any = None, *, stream: Any = None) -> DeviceRouting:
    import cupy

    check_routable(cfg)
    dev = cupy.cuda.Device().id
    logits = check_array(logits, "logits", dtypes=(np.dtype(np.float32),), device=dev, stream=stream)
    if logits.ndim != 2 or logits.shape[1] < cfg.experts:
        raise ValueError(f"logits must be [tokens, L] with L >= {cfg.experts} experts, got {tuple(logits.shape)}")
    bias_ptr = 0
    if cfg.expert_bias:
        if bias is None:
            raise ValueError(f"MoEConfig {cfg.name or ''} has expert_bias: pass bias, float32 [{cfg.experts}]")
        bias = check_array(bias, "bias", dtypes=(np.dtype(np.float32),), device=dev, stream=stream)
        if bias.shape != (cfg.experts,):
            raise ValueError(f"bias must be [{cfg.experts}], got {tuple(bias.shape)}")
        bias_ptr = bias.data.ptr
    elif bias is not None:
        raise ValueError("a bias was given but the config has expert_bias = False")
    t, k, e = int(logits.shape[0]), cfg.top_k, cfg.experts
    if t * k >= 2**31:
        raise ValueError(f"{t} tokens x top_k {k} rows exceed the int32 row index")
    with_losses = bool(cfg.aux_loss_coef or cfg.z_loss_coef)
    experts = cupy.empty((t, k), np.int32)
    weights = cupy.empty((t, k), np.float32)
    order = cupy.empty(t * k, np.int32)
    slot = cupy.empty(t * k, np.int32)
    start = cupy.zeros(e + 1, np.int32)
    losses = cupy.zeros(2, np.float32)
    mean_prob = cupy.zeros(e, np.float32) if with_losses else None
    if t == 0:
        return DeviceRouting(experts, weights, order, slot, start, losses, mean_prob)
    chunks = plan_chunks(t)
    if chunks * e >= 2**31:
        raise ValueError(f"{t} tokens x {e} experts: the plan's per-chunk table exceeds the int32 index")
    counts = cupy.empty((chunks, e), np.int32)
    offsets = cupy.empty((chunks, e), np.int32)
    prob_sums = cupy.empty((chunks, e), np.float64) if with_losses else None
    lse_sq = cupy.empty(chunks, np.float64) if with_losses else None
    null = np.uint64(0)
    rule = rule_record(cfg, bias_ptr)
    ld = np.int64(logits.shape[1])
    mod = _module()
    blocks = lambda n: (-(-n // _THREADS),)  # noqa: E731
    mod.get_function("kosmos_moe_route")(blocks(t), (_THREADS,), (rule, logits, ld, np.int32(t), experts, weights))

    def count_and_scan(chosen: Any, start: Any, losses_too: bool) -> None:
        """Per-chunk counts of `chosen`'s pairs (expert -1: counted nowhere), their offsets and
        start; losses_too: the loss partials, mean_prob and losses as well."""
        sums = (prob_sums, lse_sq, mean_prob) if losses_too else (None, None, None)
        ps, ls, mp = (null if a is None else a for a in sums)
        mod.get_function("kosmos_moe_count")((chunks,), (_THREADS,), (
            rule, logits, ld, np.int32(t), chosen, counts, ps, ls))
        mod.get_function("kosmos_moe_scan")((1,), (_SCAN_THREADS,), (
            np.int32(e), np.int32(t), np.int32(k), counts, offsets, start, ps, ls, mp,
            np.float32(cfg.aux_loss_coef), np.float32(cfg.z_loss_coef), losses))

    def place(chosen: Any) -> None:
        mod.get_function("kosmos_moe_place")((chunks,), (_THREADS,), (chosen, np.int32(t), np.int32(k),
                                             np.int32(e), offsets, order, slot))

    count_and_scan(experts, start, True)
    kept = None
    cap = cfg.capacity_of(t)
    if cap is not None and cap < t * k:
        # Token dropping: each expert keeps its `cap` pairs of highest weight (the lower pair index
        # first among equals; reference.capacity_keep), ranked within the experts' rows of the plan
        # above; the plan is then counted and placed again over the kept pairs (a dropped pair's
        # expert -1: no row, slot -1). The losses stay the choices' (they were computed above).
        pairs = cupy.arange(t * k, dtype=np.float64)
        srt = cupy.lexsort(cupy.stack([pairs, -weights.ravel().astype(np.float64),
                                       experts.ravel().astype(np.float64)]))
        pos = cupy.arange(t * k, dtype=np.int32) - start[experts.ravel()[srt]]
        kept = cupy.empty(t * k, dtype=bool)
        kept[srt] = pos < cap
        kept = kept.reshape(t, k)
        order.fill(-1)  # the tail past the kept rows: defined, so reruns are bitwise equal
        chosen = cupy.where(kept, experts, np.int32(-1))
        start = cupy.zeros(e + 1, np.int32)
        count_and_scan(chosen, start, False)
        place(chosen)
    else:
        place(experts)
    return DeviceRouting(experts, weights, order, slot, start, losses, mean_prob, kept)
