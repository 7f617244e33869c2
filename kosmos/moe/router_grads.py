"""The router's backward per token (hipsrc/kosmos/moe/router_grads.h): each pair's combine-weight
gradient from its expert output, then the token's d logits through the normalisation, the score,
the aux and z losses (kosmos/moe/reference.py router_logit_grads), a warp per token.

    rec = router_grads_record(cfg, logits=..., chosen=..., start=..., comb=..., slot=..., dy=...,
                              status=..., d_logits=...)
    launch_router_grads(rec, kernels)           # standalone (MoELayer's device path)

MoEBackward runs the same device code as the first phase of its launch, on the same record.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime.mirror import StructMirror, address, record
from .config import MoEConfig

_u64, _i64, _i32, _f32 = np.uint64, np.int64, np.int32, np.float32
ROUTER_GRADS_DTYPE = np.dtype(
    [("comb", _u64), ("own_y", _u64), ("own_runs", _u64), ("slot", _u64), ("dy", _u64), ("status", _u64),
     ("d_weights", _u64), ("logits", _u64), ("chosen", _u64), ("start", _u64), ("d_logits", _u64),
     ("d_logits_f32", _u64),
     ("tokens", _i64), ("ld_logits", _i64), ("ld_out", _i64),
     ("hidden", _i32), ("experts", _i32), ("top_k", _i32), ("softmax", _i32), ("normalize", _i32),
     ("scaling", _f32), ("aux_coef", _f32), ("z_coef", _f32), ("e_loc", _i32)],
    align=True,
)
MIRRORS = [StructMirror("kosmos::moe::RouterGrads", ROUTER_GRADS_DTYPE)]


def pair_starts(chosen: Any, experts: int, out: Any = None) -> Any:
    """[E + 1] int32: the pairs of each expert among `chosen` [T, k], as a prefix (the aux loss's
    frac; a routing's own `start` where no pair was dropped). On the device, no host sync; into
    `out` when given (a held buffer: the fused backward's memo is keyed by its address)."""
    import cupy

    counts = cupy.zeros((experts,), cupy.int32)
    if chosen.size:  # a scatter-add, not cupy.bincount (which reads the max to the host)
        cupy.add.at(counts, chosen.ravel(), 1)
    start = cupy.empty((experts + 1,), cupy.int32) if out is None else out
    start[0] = 0
    cupy.cumsum(counts, dtype=cupy.int32, out=start[1:])
    return start


def router_grads_record(cfg: MoEConfig, *, logits: Any, chosen: Any, start: Any, hidden: int,
                        d_weights: Any = None, comb: Any = None, slot: Any = None, dy: Any = None,
                        status: Any = None, d_logits: Any = None, d_logits_f32: Any = None,
                        own_y: Any = None, own_runs: Any = None) -> np.void:
    """The RouterGrads record of T = chosen.shape[0] tokens (device arrays, C-contiguous). With
    comb (the forward's combine buffer, rows of `hidden` bf16), slot, dy and status the pairs' d w
    are computed (and stored to d_weights when given); without, d_weights [T, k] fp32 is read.
    own_y and own_runs (after a forward whose combine left this rank's own rows in place,
    MoECombine own_in_place): its expert outputs [rows, hidden] bf16 and the combine's
    own_runs [3, E/P] int32, where the pairs its own experts took are read instead of comb.
    Outputs: d_logits [T, >= E] bf16 (columns past E zeroed) and/or d_logits_f32 [T, E]."""
    from .route import CONSTANTS

    if cfg.top_k > CONSTANTS["kMaxTopK"]:
        raise ValueError(f"top_k = {cfg.top_k}: the router's backward takes at most {CONSTANTS['kMaxTopK']}")
    t = int(chosen.shape[0])
    return record(
        ROUTER_GRADS_DTYPE, comb=address(comb), slot=address(slot), dy=address(dy), status=address(status),
        d_weights=address(d_weights), logits=address(logits), chosen=address(chosen), start=address(start),
        d_logits=address(d_logits), d_logits_f32=address(d_logits_f32), tokens=t, own_y=address(own_y),
        own_runs=address(own_runs), e_loc=int(own_runs.shape[1]) if own_runs is not None else 0,
        ld_logits=int(logits.shape[1]) if t else 0, ld_out=int(d_logits.shape[1]) if d_logits is not None else 0,
        hidden=hidden, experts=cfg.experts, top_k=cfg.top_k, softmax=int(cfg.score == "softmax"),
        normalize=int(cfg.normalize), scaling=cfg.scaling, aux_coef=cfg.aux_loss_coef, z_coef=cfg.z_loss_coef)


def launch_router_grads(rec: np.void, kernels: Any) -> None:
    """kosmos_moe_router_grads on `rec`, on the current stream (kernels: MoELayer's
    _backward_kernels): 256 threads a CTA, a warp per token (the grid strides over the rest)."""
    t = int(rec["tokens"])
    if t:
        kernels("kosmos_moe_router_grads")((min(-(-t // 8), 65535),), (256,), (rec,))
