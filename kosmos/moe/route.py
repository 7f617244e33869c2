"""MoE routing on the device: router logits in, each token's experts and weights and the dispatch
plan out, in four small launches (hipsrc/moe_route.hip: a thread per token, then a CTA per chunk of
32 tokens; a fifth under token dropping, a CTA per expert; the forward megakernel runs the same code).

    r = route(logits, cfg, bias=None)        # logits: float32 CuPy [T, L], L >= cfg.experts
    r.experts [T, k] int32 (best first), r.weights [T, k] float32,
    r.order [T*k] int32 (row -> t*k + j, expert-major; under token dropping there are fewer rows
    than pairs and the rows past start[E] hold -1), r.slot [T*k] (its inverse; -1 for a dropped pair),
    r.start [E + 1] int32 (expert e owns rows start[e]:start[e+1])
    r.losses [2] float32 (aux, z: reference.route's aux_loss and z_loss; zeros unless the config
    has a coefficient), r.mean_prob [E] float32 (each expert's normalised score averaged over the
    tokens: what the aux loss's backward needs), or None
    r.kept [T, k] bool under token dropping (MoEConfig.capacity_factor): each expert keeps its
    capacity_of(T) pairs of highest weight, the lower pair index first among equal weights, NaN
    weights last (reference.capacity_keep); None when nothing can drop

The rule is kosmos.moe.reference.route's, in fp32: the decisions agree with the float64 reference
except where two candidates are within fp32 rounding of each other, and among exactly equal
values the lower expert (or group) index wins in both. Only the first E columns of `logits` are
read, so a router GEMM padded to the builder's 64-column tiles can be passed as it is. A NaN
choice value (a NaN logit or bias; softmax over an infinite logit) ranks as -inf, in the reference
too: k distinct experts always come out (their weights may be NaN). The plan is a stable counting
sort without atomics: identical on every run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrays import check_array
from ..runtime.mirror import StructMirror, address, record
from ..runtime.call_cache import remember
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
_u64 = np.uint64
# RouteParams of hipsrc/kosmos/moe/router.h: the routing inside the forward megakernel (LaunchRouting)
ROUTE_PARAMS_DTYPE = np.dtype(
    [("rule", ROUTE_RULE_DTYPE), ("logits", _u64), ("ld", np.int64), ("experts", _u64), ("weights", _u64),
     ("order", _u64), ("slot", _u64), ("start", _u64), ("all_order", _u64), ("kept", _u64), ("counts", _u64),
     ("prob_sums", _u64), ("lse_sq", _u64), ("mean_prob", _u64), ("losses", _u64), ("grid", _u64),
     ("tokens", np.int32), ("aux_coef", np.float32), ("z_coef", np.float32), ("capacity", np.int32)],
    align=True,
)
# KeepArgs of hipsrc/kosmos/moe/capacity.h: token dropping's keep rule (kosmos_moe_keep)
KEEP_ARGS_DTYPE = np.dtype(
    [("start_all", _u64), ("order_all", _u64), ("weights", _u64), ("order", _u64), ("slot", _u64),
     ("kept", _u64), ("start", _u64), ("experts", np.int32), ("capacity", np.int32), ("pairs", np.int32),
     ("pad_", np.int32)],
    align=True,
)
MIRRORS = [StructMirror("kosmos::moe::RouteRule", ROUTE_RULE_DTYPE),
           StructMirror("kosmos::moe::RouteParams", ROUTE_PARAMS_DTYPE),
           StructMirror("kosmos::moe::KeepArgs", KEEP_ARGS_DTYPE)]


def no_route() -> np.void:
    """The RouteParams of a forward launch whose routing came with the call (nothing routes there)."""
    rec = np.zeros((), ROUTE_PARAMS_DTYPE)
    rec["tokens"], rec["capacity"] = -1, -1
    return rec[()]
_THREADS = 128
_SCAN_THREADS = 512  # the scan's one CTA: a thread per expert (more experts: threads stride)
_KEEP_THREADS = 256
_KEEP_CTAS = 1024    # kosmos_moe_keep: a CTA an expert, grid-stride past this


def keep_words(experts: int, threads: int) -> int:
    """The shared i32 words the keep rule takes (capacity.h keep_words)."""
    return experts + 1 + 256 + 2 * threads + 4


def place_words(experts: int) -> int:
    """The shared i32 words the megakernel's chunk placement holds (plan.h place_words)."""
    return (2 * experts + 1 + CONSTANTS["kChunk"] * CONSTANTS["kMaxTopK"] + 3) // 4 * 4


def launch_scratch_bytes(experts: int, threads: int) -> int:
    """Shared bytes the in-launch plan and keep rule take of the lent stages (place_words, then
    keep_words)."""
    return 4 * (place_words(experts) + keep_words(experts, threads))


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


def bias_address(cfg: MoEConfig, bias: Any, dev: int, stream: Any) -> int:
    """The expert bias's address (0 without one), checked against the config."""
    if not cfg.expert_bias:
        if bias is not None:
            raise ValueError("a bias was given but the config has expert_bias = False")
        return 0
    if bias is None:
        raise ValueError(f"MoEConfig {cfg.name or ''} has expert_bias: pass bias, float32 [{cfg.experts}]")
    bias = check_array(bias, "bias", dtypes=(np.dtype(np.float32),), device=dev, stream=stream)
    if bias.shape != (cfg.experts,):
        raise ValueError(f"bias must be [{cfg.experts}], got {tuple(bias.shape)}")
    return bias.data.ptr


def plan_chunks(tokens: int) -> int:
    return -(-tokens // CONSTANTS["kChunk"])


def check_plan_size(cfg: MoEConfig, tokens: int) -> None:
    """The plan's int32 indices: rows (tokens x top_k) and the per-chunk table (chunks x experts)."""
    k, e = cfg.top_k, cfg.experts
    if tokens * k >= 2**31 or plan_chunks(tokens) * e >= 2**31:
        raise ValueError(f"{tokens} tokens with top_k {k} and {e} experts exceed the router's int32 indices")


def drops_tokens(cfg: MoEConfig, tokens: int) -> bool:
    """Whether a routing of `tokens` tokens drops pairs past their experts' capacity."""
    cap = cfg.capacity_of(tokens)
    return cap is not None and cap < tokens * cfg.top_k


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
    bias_ptr = bias_address(cfg, bias, dev, stream)
    t, k, e = int(logits.shape[0]), cfg.top_k, cfg.experts
    check_plan_size(cfg, t)
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

    ps, ls, mp = (null if a is None else a for a in (prob_sums, lse_sq, mean_prob))
    mod.get_function("kosmos_moe_count")((chunks,), (_THREADS,), (rule, logits, ld, np.int32(t), experts, counts,
                                                                  ps, ls))
    mod.get_function("kosmos_moe_scan")((1,), (_SCAN_THREADS,), (
        np.int32(e), np.int32(t), np.int32(k), counts, offsets, start, ps, ls, mp,
        np.float32(cfg.aux_loss_coef), np.float32(cfg.z_loss_coef), losses))
    dropping = drops_tokens(cfg, t)
    # under token dropping the whole plan is the keep rule's input; the losses stay the choices'
    all_order = cupy.empty(t * k, np.int32) if dropping else order
    mod.get_function("kosmos_moe_place")((chunks,), (_THREADS,), (experts, np.int32(t), np.int32(k),
                                                                  np.int32(e), offsets, all_order, slot))
    if not dropping:
        return DeviceRouting(experts, weights, order, slot, start, losses, mean_prob)
    kept = cupy.empty((t, k), bool)
    kept_start = cupy.empty(e + 1, np.int32)
    args = record(KEEP_ARGS_DTYPE, start_all=start.data.ptr, order_all=all_order.data.ptr, weights=weights.data.ptr,
                  order=order.data.ptr, slot=slot.data.ptr, kept=kept.data.ptr, start=kept_start.data.ptr,
                  experts=e, capacity=cfg.capacity_of(t), pairs=t * k)
    mod.get_function("kosmos_moe_keep")((min(e, _KEEP_CTAS),), (_KEEP_THREADS,), (args,),
                                        shared_mem=4 * keep_words(e, _KEEP_THREADS))
    return DeviceRouting(experts, weights, order, slot, kept_start, losses, mean_prob, kept)


ROUTER_MIN_SLABS = 4     # a split's fewest 64-deep K slabs (shorter ranges spend their time filling the pipeline)
ROUTER_MAX_SPLITS = 32
ROUTER_SPLIT_UNITS = 132  # the units a split aims at (an H100's or H200's SMs): a constant, not the
                          # machine's SM count, so the logits' bits never depend on the GPU model


def router_splits(tokens: int, columns: int, hidden: int) -> int:
    """Split-K factor of the router GEMM (logits = x Wr^T, fp32, in 128 x 256 tiles): at small token
    counts its few tiles leave most of the grid idle while every CTA waits to route (DeepSeek-V3 at
    1,024 tokens: 8 tiles of K 7,168, 69 us on an H100 with 124 CTAs waiting), so each tile's K is
    cut until the units about fill ROUTER_SPLIT_UNITS, each range at least ROUTER_MIN_SLABS slabs.
    The fused forward's router (hipsrc/kosmos/moe/router.h) and the device path's
    (gemm.matmul(split_k=...)) take the same factor, and both sum the fp32 partials in split order:
    the same bits."""
    from ..gemm import leaves_empty_k_range

    if tokens <= 0:
        return 1
    tiles = -(-tokens // 128) * -(-columns // 256)
    slabs = -(-hidden // 64)
    s = max(1, min(ROUTER_SPLIT_UNITS // tiles, slabs // ROUTER_MIN_SLABS, ROUTER_MAX_SPLITS))
    while s > 1 and leaves_empty_k_range(s, slabs):  # gemm.check_split_k's rule
        s -= 1
    return s


class LaunchRouting:
    """The routing inside the MoE forward megakernel (MoEForward called with it instead of a
    DeviceRouting, and the router's weights): the router GEMM's fp32 logits and the plan in buffers
    for up to `max_tokens` tokens a call, allocated once (hipsrc/kosmos/moe/router.h runs route()'s
    steps and keep rule, so both give the same bits). A call's outputs (routing(t), logits) are
    valid until the next call."""

    def __init__(self, cfg: MoEConfig, max_tokens: int):
        import cupy

        from ..gemm import device_constants

        check_routable(cfg)
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        check_plan_size(cfg, max_tokens)
        t, k, e = max_tokens, cfg.top_k, cfg.experts
        c = device_constants()
        need, room = launch_scratch_bytes(e, c["kThreads"]), c["kSmemBytesPortable"]
        if need > room:
            raise ValueError(f"{e} experts: the routing inside the launch would take {need} bytes of shared memory, "
                             f"past {room} (route outside the launch: MoELayer path 'device')")
        chunks = plan_chunks(t)
        self.cfg, self.max_tokens = cfg, max_tokens
        self.columns = -(-e // 64) * 64  # the logits' row: the router GEMM's 64-column tiles
        self.with_losses = bool(cfg.aux_loss_coef or cfg.z_loss_coef)
        self.logits = cupy.zeros((t, self.columns), np.float32)
        # the router GEMM's split-K partials [splits x rows padded to whole tiles, columns], for the
        # largest of any call's (router_splits); zeroed once: columns past E are never written
        split_rows = [(router_splits(m * 128, self.columns, cfg.hidden), m * 128) for m in range(1, -(-t // 128) + 1)]
        self._partials = cupy.zeros((max((s * r for s, r in split_rows if s > 1), default=0), self.columns),
                                    np.float32)
        self.experts = cupy.zeros((t, k), np.int32)
        self.weights = cupy.zeros((t, k), np.float32)
        self.order = cupy.zeros(t * k, np.int32)
        self.slot = cupy.zeros(t * k, np.int32)
        self.start = cupy.zeros(e + 1, np.int32)
        self.losses = cupy.zeros(2, np.float32)
        self.mean_prob = cupy.zeros(e, np.float32) if self.with_losses else None
        self._scratch = [cupy.zeros((chunks, e), np.int32)]  # counts
        if self.with_losses:
            self._scratch += [cupy.zeros((chunks, e), np.float64), cupy.zeros(chunks, np.float64)]
        # token dropping: the whole plan (the keep rule's input) and the kept mask
        drops = cfg.capacity_factor > 0
        self._all_order = cupy.zeros(t * k, np.int32) if drops else None
        self.kept = cupy.zeros((t, k), bool) if drops else None
        self._grid = cupy.zeros(2, np.uint64)  # the grid barrier's words (hipsrc/kosmos/grid.h)
        self._tmaps: dict = {}
        cupy.cuda.runtime.deviceSynchronize()  # the zeroed words, before a first call on any stream

    @property
    def nbytes(self) -> int:
        arrays = [self.logits, self._partials, self.experts, self.weights, self.order, self.slot, self.start,
                  self.losses, self._grid, *self._scratch, self.mean_prob, self._all_order, self.kept]
        return int(sum(a.nbytes for a in arrays if a is not None))

    def routing(self, tokens: int) -> DeviceRouting:
        """The last call's routing of `tokens` tokens: views of the buffers."""
        if not 0 <= tokens <= self.max_tokens:
            raise ValueError(f"{tokens} tokens: this routing holds at most {self.max_tokens}")
        k = self.cfg.top_k
        kept = self.kept[:tokens] if drops_tokens(self.cfg, tokens) else None
        return DeviceRouting(self.experts[:tokens], self.weights[:tokens], self.order[:tokens * k],
                             self.slot[:tokens * k], self.start, self.losses, self.mean_prob, kept)

    def head(self, x: Any, router_w: Any, bias: Any, uses_tma: bool, stream: Any = None) -> tuple:
        """The forward kernel's router arguments for this call: the GEMM's (x, router_w, logits)
        maps, Problem and fp32 epilogue, then the RouteParams record. x: bf16 [T, H], T <=
        max_tokens; router_w: bf16 [E, H]; bias: fp32 [E] when the config has expert_bias."""
        import cupy

        from .. import gemm
        from ..dtypes import bfloat16

        cfg, dev = self.cfg, cupy.cuda.Device().id
        e, h = cfg.experts, int(x.shape[1])
        t = int(x.shape[0])
        capacity = cfg.capacity_of(t) if drops_tokens(cfg, t) else -1
        router_w = check_array(router_w, "router_w", dtypes=(bfloat16,), device=dev, stream=stream)
        if router_w.shape != (e, h):
            raise ValueError(f"router_w must be [{e}, {h}] bf16, got {tuple(router_w.shape)}")
        bias_ptr = bias_address(cfg, bias, dev, stream)
        logits = self.logits[:t]
        shape = gemm.gemm_shape("TN", (max(t, 1), h), (self.columns, h))  # checks H; N is E padded
        tiles_m, tiles_n, k_slabs = gemm.tile_counts(shape)
        if h != cfg.hidden:  # (the partials buffer is sized for the config's hidden)
            raise ValueError(f"x must be [T, {cfg.hidden}] (the config's hidden), got {tuple(x.shape)}")
        splits = router_splits(t, self.columns, h)
        prob = gemm.problem_record(x, router_w, t, e, h, (tiles_m if t else 0, tiles_n, k_slabs), k_splits=splits)
        # split-K: the tiles store fp32 partials (rows padded to whole tiles), which the launch sums
        # into the logits in split order after a grid barrier (router.h sum_router_partials)
        out = self._partials[:splits * tiles_m * 128] if splits > 1 else logits
        epi = gemm.epi_record(out, tiles_m * 128 if splits > 1 else t, e)
        maps = (gemm.ZERO_TMAP,) * 3
        if uses_tma and t:
            key = (x.data.ptr, t, router_w.data.ptr)
            maps = self._tmaps.get(key)
            if maps is None:
                # router_w's map has E rows: the tile's rows past them load as zeros
                maps = (gemm.tmap_of(x), gemm.tmap_of(router_w), gemm.tmap_of(out))
                remember(self._tmaps, key, maps)
        counts, *sums = self._scratch
        prob_sums, lse_sq = sums if sums else (None, None)
        rec = record(ROUTE_PARAMS_DTYPE, rule=rule_record(cfg, bias_ptr), logits=logits.data.ptr,
                     ld=self.columns, experts=self.experts.data.ptr, weights=self.weights.data.ptr,
                     order=self.order.data.ptr, slot=self.slot.data.ptr, start=self.start.data.ptr,
                     all_order=address(self._all_order), kept=address(self.kept), counts=counts.data.ptr,
                     prob_sums=address(prob_sums), lse_sq=address(lse_sq), mean_prob=address(self.mean_prob),
                     losses=self.losses.data.ptr, grid=self._grid.data.ptr, tokens=t, aux_coef=cfg.aux_loss_coef,
                     z_coef=cfg.z_loss_coef, capacity=capacity)
        return (*maps, prob, epi, rec)

