"""MoELayer: the expert-parallel MoE forward over a World, router to fold.

    layer = MoELayer(world, cfg, max_tokens=4096)           # E / P experts per rank
    params = MoEParams.random(cfg, world, seed=0)           # or your own arrays (shapes below)
    y, ctx = layer.forward(x, params)                       # x: bf16 CuPy [T, H], T <= max_tokens

Four paths, the same result (the fused and device paths bitwise so, output and gradients):
- path="device" (the default: correct at 1-4 ranks on the H200, and the fastest at world 1): our
  kernels as separate launches with nothing on the host: route, MoEDispatch (counts through the
  symmetric heap, rows pushed to their final expert-major place), the grouped GEMMs on its arena,
  MoECombine (rows back and the fold). A forward + backward step captures in one CUDA graph
  (kosmos.graphs.capture) and replays with new tokens and so a new routing: the plans take their
  call epochs from the device (hipsrc/kosmos/calls.h), the GEMM queues reset on the device.
- path="fused": as "device", router to fold in one launch (MoEForward, kosmos/moe/forward.py):
  every CTA builds router GEMM tiles, the routing and the dispatch plan follow between grid
  barriers (route()'s steps: the same bits), warps beside the builders push rows, each GEMM1 tile
  starts once its rows have landed, each GEMM2 tile once GEMM1 has finished its tile row, rows go
  home as soon as their GEMM2 tiles are done, then the fold; the shared experts' MLP runs as jobs of
  the same builder call (its first GEMM before the routed experts', its second after). Token
  dropping (capacity_factor) too: each expert keeps its pairs of highest weight by a radix select
  between two more grid barriers (hipsrc/kosmos/moe/capacity.h). Captures in a CUDA graph as "device".
- path="serial": the counts cross ranks through MPI and the rows through kosmos AllToAll:
  1. router logits X Wr^T (fp32, kosmos.matmul) and kosmos.moe.route: experts, weights, the
     dispatch order (expert-major, so owner-major);
  2. the rows in dispatch order to their experts' owners (kosmos AllToAll), then expert-major at
     the owner (source-major inside an expert);
  3. the expert GEMMs (kosmos.grouped_matmul: TN with the SwiGLU epilogue, then TN);
  4. the rows back to their tokens' ranks (AllToAll), and the fold: each token's k rows weighted
     by its fp32 router weights and summed in fp32 with the shared experts' output, rounded once.
- path="baseline": what one would write without kosmos, for the benchmarks: as "serial" with the
  rows moved by NCCL grouped send/recv and cuBLAS (cupy.matmul) per expert; one rank per GPU.
  Neither host path captures in a CUDA graph (their counts cross ranks on the host).
The backward (MoELayer.backward) runs on every path: the device and fused paths as separate
launches over their plans (bitwise equal to each other), the serial and baseline paths moving rows
as their forward did (AllToAll or NCCL) with our grouped GEMMs or cupy.matmul per expert. Every
forward keeps GEMM1's pre-activations, so no backward recomputes them.

Shapes (bf16 unless said): router_w [E, H]; w1 [E/P, 2I, H] (gate rows, then up rows) and
w2 [E/P, H, I] of this rank's experts (global experts r*E/P ... (r+1)*E/P - 1); bias [E] fp32
when cfg.expert_bias; shared_w1 [2 Fs, H], shared_w2 [H, Fs] when cfg.shared (the S shared experts
as one SwiGLU MLP of width Fs = cfg.shared_width: every gate row, then every up row). Every call is
collective (all ranks call forward, in the same order); token counts may differ between ranks.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import gemm, grouped
from ..arrays import check_array
from ..collectives import AllToAll
from ..dtypes import bf16_to_f32, bfloat16, copy_into, dtype_name, f32_to_bf16, float32, random_bf16
from ..exchange import agree_args, all_ok
from ..reference import NcclBaseline
from ..runtime.call_cache import CallCache, HeldBuffers, call_signature
from ..runtime.streams import uses_stream
from ..world import World
from .config import MoEConfig
from .combine import MoECombine
from .dispatch import MoEDispatch
from .backward import MoEBackward, RouterBackward
from .forward import MoEForward, SharedMLP
from .reference import silu
from .route import DeviceRouting, LaunchRouting, check_plan_size, check_routable, route, router_splits
from .router_grads import launch_router_grads, pair_starts, router_grads_record

PATHS = ("serial", "device", "fused", "baseline")


@dataclass
class MoEParams:
    router_w: Any
    w1: Any
    w2: Any
    bias: Any = None
    shared_w1: Any = None
    shared_w2: Any = None

    @classmethod
    def random(cls, cfg: MoEConfig, world: World, seed: int = 0, scale: float = 0.02) -> "MoEParams":
        """Random parameters: the same global tensors at every world size, each rank keeping its
        experts (expert_tensors(cfg, g, seed) rebuilds expert g anywhere)."""
        import cupy

        e_loc = cfg.local_experts(world.size)
        mine = [expert_tensors(cfg, g, seed, scale) for g in range(world.rank * e_loc, (world.rank + 1) * e_loc)]
        bias = None
        if cfg.expert_bias:
            bias = cupy.random.RandomState(seed + 7).standard_normal(cfg.experts, dtype=cupy.float32) * 0.01
        shared_w1 = shared_w2 = None
        if cfg.shared:
            shared_w1 = random_bf16((2 * cfg.shared_width, cfg.hidden), seed + 11, scale)
            shared_w2 = random_bf16((cfg.hidden, cfg.shared_width), seed + 13, scale)
        return cls(random_bf16((cfg.experts, cfg.hidden), seed + 5, scale), _stack([w1 for w1, _ in mine]),
                   _stack([w2 for _, w2 in mine]), bias, shared_w1, shared_w2)


def expert_tensors(cfg: MoEConfig, g: int, seed: int = 0, scale: float = 0.02) -> tuple[Any, Any]:
    """Global expert g's (w1 [2I, H], w2 [H, I]) as MoEParams.random draws them."""
    h, i = cfg.hidden, cfg.intermediate
    return (random_bf16((2 * i, h), seed * 1_000_003 + 65_537 + g, scale),
            random_bf16((h, i), seed * 1_000_003 + 2 * 65_537 + g, scale))


def _stack(arrays: list) -> Any:
    """cupy.stack for bf16 arrays (through their 16-bit storage)."""
    import cupy

    return cupy.stack([_u16(a) for a in arrays]).view(bfloat16)


@dataclass
class MoEContext:
    """What a forward leaves for its backward (and for tests)."""
    routing: DeviceRouting
    send_counts: np.ndarray | None   # [P] rows this rank sent to each owner (serial path)
    recv_counts: np.ndarray | None   # [P] rows this rank received from each source (serial path)
    group_rows: Any           # [E/P] int32 device: rows of each local expert
    expert_major: Any         # [R] int64 device: received-row index of each expert-major row (serial path)
    x_experts: Any            # [R, H] bf16: the local experts' input rows, expert-major
    h: Any                    # [R, I] bf16: silu(gate) * up
    x: Any = None             # [T, H] bf16: the forward's input (device path: for the backward)
    logits: Any = None        # [T, E padded] fp32: the router logits (device path)
    gate_up: Any = None       # [R, 2I] bf16: the experts' pre-activations [gate, up]
    shared: tuple = ()        # the shared MLP's (h [T, Fs], gate_up [T, 2Fs]) bf16; () without one
    combined: Any = None      # [T k, H] bf16: each pair's expert output, dispatch order (serial, baseline)
    y_experts: Any = None     # [R, H] bf16: the experts' outputs, expert-major (device paths: the rows this
                              # rank's own experts sent it stayed there, the combine's own_runs says where)
    calls: tuple = ()         # the dispatch and combine plans' call counts after this forward


@dataclass
class MoEGradients:
    """MoELayer.backward's result: d(sum(dy * y) + aux + z) for every input and parameter."""
    dx: Any                   # [T, H] bf16
    d_router_w: Any           # [E, H] fp32
    dw1: Any                  # [E/P, 2I, H] fp32 (or bf16: backward's wgrad_dtype), this rank's experts
    dw2: Any                  # [E/P, H, I] fp32 (or bf16)
    d_shared_w1: Any = None   # [2 Fs, H] fp32 (or bf16)
    d_shared_w2: Any = None   # [H, Fs] fp32 (or bf16)


def _backward_kernels(world: World) -> Any:
    """name -> the kernel of hipsrc/moe_backward.hip (the backward's elementwise steps)."""
    from ..runtime.module import load_module

    return load_module("moe_backward.hip", world=world).get_function


def router_backward(logits: Any, chosen: Any, d_weights: Any, cfg: MoEConfig, kernels: Any) -> Any:
    """d(logits) [T, E] fp32 from the combine weights' gradients d_weights [T, k] (the `chosen`
    experts [T, k]; logits [T, >= E] fp32): reference.router_logit_grads, the finite-difference-
    checked rule, as one kernel, a warp per token row (hipsrc/kosmos/moe/router_grads.h, the code
    the layer's backward runs on the combine buffer). `kernels`: _backward_kernels(world)."""
    import cupy

    t, e = d_weights.shape[0], cfg.experts
    d_logits = cupy.empty((t, e), float32)
    if t == 0:
        return d_logits
    chosen = cupy.ascontiguousarray(chosen, dtype=cupy.int32)
    rec = router_grads_record(cfg, logits=cupy.ascontiguousarray(logits, dtype=float32), chosen=chosen,
                              start=pair_starts(chosen, e), hidden=cfg.hidden,
                              d_weights=cupy.ascontiguousarray(d_weights, dtype=float32), d_logits_f32=d_logits)
    launch_router_grads(rec, kernels)
    return d_logits


def context_bytes(cfg: MoEConfig, capacity_rows: int, tokens: int, router_cols: int,
                  expert_rows_copied: bool = False, expert_outputs_kept: bool = False) -> int:
    """Bytes a forward keeps for its backward (MoEContext): GEMM1's pre-activations [gate, up] and
    h (capacity rows, bf16), the router logits (fp32), the routing (experts, weights, order, slot:
    4 bytes per pair each; under token dropping one more byte, kept), the shared MLP's h and
    [gate, up] (bf16); the host paths also keep a copy of the expert rows (capacity x H) and each
    pair's returned row (T k x H), bf16; path "device" the experts' outputs (capacity x H, bf16:
    the router's backward reads this rank's own rows there; path "fused" keeps them in its launch's
    buffer, held from the build)."""
    i, h, k = cfg.intermediate, cfg.hidden, cfg.top_k
    kept = capacity_rows * 3 * i * 2 + tokens * router_cols * 4 + 4 * tokens * k * 4
    if cfg.capacity_factor:  # the kept mask (LaunchRouting.kept)
        kept += tokens * k
    kept += tokens * 3 * cfg.shared_width * 2
    if expert_rows_copied:
        kept += (capacity_rows + tokens * k) * h * 2
    if expert_outputs_kept:
        kept += capacity_rows * h * 2
    return int(kept)


def launch_buffer_bytes(cfg: MoEConfig, capacity_rows: int, tokens: int, router_cols: int, backwards: int = 1) -> int:
    """Bytes path "fused"'s launches hold from their first call to close() (bf16): the forward's h
    [capacity, I] and expert outputs [capacity, H] (kosmos/moe/forward.py); each backward's (one per
    wgrad dtype used) d[gate, up] [capacity, 2I], dX rows [capacity, H], the shared MLP's
    d[gate, up] [T, 2 Fs], the router's d logits [T, router_cols], the router's dx [T, H] fp32
    (the fold's addend) and the fold's unit weights [T, k] fp32 (kosmos/moe/backward.py)."""
    i, h = cfg.intermediate, cfg.hidden
    forward = capacity_rows * (i + h) * 2
    backward = (capacity_rows * (2 * i + h) * 2 + tokens * 2 * cfg.shared_width * 2 + tokens * router_cols * 2
                + tokens * h * 4 + tokens * cfg.top_k * 4)
    return int(forward + backwards * backward)


def _u16(x: Any) -> Any:
    return x.view(np.uint16)


def _zeros(shape: tuple[int, ...], dt: np.dtype) -> Any:
    """Zeros of fp32 or bf16 (bits 0 in both; CuPy has no bf16 fill of its own)."""
    import cupy

    return cupy.zeros(shape, np.uint32 if dt == float32 else np.uint16).view(dt)


def _pair_rows(rows: Any, r: DeviceRouting, t: int) -> Any:
    """[T, k, H] fp32: each (token, choice) pair's row of `rows` (bf16, in the dispatch order, the
    pair's at index slot), zeros for a pair dropped past its expert's capacity (slot -1)."""
    import cupy

    got = bf16_to_f32(_u16(rows)[cupy.maximum(r.slot, 0).astype(cupy.int64)].view(bfloat16))
    if r.kept is not None:  # a select, not a product: row 0 may hold an Inf
        got = cupy.where(r.kept.reshape(-1, 1), got, np.float32(0))
    return got.reshape(t, r.experts.shape[1], -1)


class MoELayer:
    def __init__(self, world: World, cfg: MoEConfig, max_tokens: int, *, capacity_rows: int | None = None,
                 path: str = "device", movers: int | None = None, crew: int | None = None):
        """max_tokens: the most tokens any rank passes to forward. capacity_rows: the most rows a rank
        may receive in one call (default: dropless, P * max_tokens * min(k, E/P); under token dropping,
        cfg.capacity_factor > 0, at most P * E/P * cfg.capacity_of(max_tokens)); a routing that would
        exceed it raises on every rank before anything moves. movers and crew (path "fused"): CTAs
        that push rows before they build, and CTAs that start the combine instead of building the
        second GEMM (defaults: MoEForward's)."""
        world.require_gpu()
        check_routable(cfg)
        agree_args(world.comm, "MoELayer", cfg=repr(cfg), max_tokens=max_tokens, capacity_rows=capacity_rows,
                   path=path)
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        if path not in PATHS:
            raise ValueError(f"path must be one of {PATHS}, got {path!r}")
        self.path, self.movers, self.crew = path, movers, crew
        self.world, self.cfg, self.max_tokens = world, cfg, max_tokens
        self.P = world.size
        self.e_loc = cfg.local_experts(self.P)
        if self.e_loc > grouped.max_groups():
            raise ValueError(f"{self.e_loc} experts per rank: the grouped GEMM takes at most {grouped.max_groups()}; "
                             f"use more ranks")
        k = cfg.top_k
        most = self.P * max_tokens * min(k, self.e_loc)  # dropless: every pair of every rank here
        cap = cfg.capacity_of(max_tokens)  # token dropping: each rank sends each expert at most cap rows
        self.capacity_rows = capacity_rows or (most if cap is None else min(most, self.P * self.e_loc * cap))
        # Bounds that would otherwise fail on one rank alone, mid-forward (the hot rank's grouped GEMM,
        # the router's int32 indices): refused here, on every rank alike.
        if self.capacity_rows // gemm.tile_shape()[0] + self.e_loc >= 2**16:
            raise ValueError(f"capacity_rows = {self.capacity_rows}: the grouped GEMM takes fewer than "
                             f"{(2**16 - self.e_loc) * gemm.tile_shape()[0]} rows; pass a smaller capacity_rows")
        check_plan_size(cfg, max_tokens)
        h = cfg.hidden
        if path in ("device", "fused"):
            self._dispatch = MoEDispatch(world, cfg.experts, 2 * h, self.capacity_rows)
            self._combine = MoECombine(world, cfg.experts, h, max_tokens, k)
            self._forward = MoEForward(self._dispatch, self._combine) if path == "fused" else None
            self._routing = LaunchRouting(cfg, max_tokens) if path == "fused" else None  # routed in its launch
            self._backwards: dict = {}  # path "fused": MoEBackward per wgrad dtype, built at first use
            # the backward's own arena: the forward's (x_experts) must outlive the dY dispatch
            self._dispatch_bwd = MoEDispatch(world, cfg.experts, 2 * h, self.capacity_rows)
        elif path == "baseline":  # NCCL rows (one rank per GPU), cuBLAS per expert
            self._nccl = NcclBaseline(world)
            self._dispatch = self._combine = None
        else:
            self._dispatch = AllToAll(world, self.capacity_rows, (h,), bfloat16)
            self._combine = AllToAll(world, max_tokens * k, (h,), bfloat16)
        self._router_pad = -(-cfg.experts // 64) * 64  # the router GEMM's output columns (tile multiple)
        # the device paths' forward buffers (bf16), kept from call to call: only the last forward's
        # context is valid (its arena and combine buffer are reused), so one set serves every
        # forward, and the stable addresses let the kernels' argument memos hit
        self._held = HeldBuffers()
        # backward's `out` checks passed, by the signatures of every array they read (a training
        # loop's steps pass the same buffers; on the H100 machine a step with out= took ~65 us more
        # host time than one without, session 36: these checks are most of it by reading, not measured)
        self._checked_outs = CallCache(size=8)

    def close(self) -> None:
        for plan in (self._dispatch, self._combine, getattr(self, "_dispatch_bwd", None), getattr(self, "_nccl", None)):
            if plan is not None:
                plan.close()

    def memory(self) -> dict[str, int]:
        """Bytes on this rank: `symmetric_heaps`, held from the build to close() (the dispatch
        arenas of capacity_rows rows, the combine buffer, their flags; the baseline's NCCL buffers
        are NCCL's and not counted); `routing`, path "fused"'s routing buffers (logits and plan for
        max_tokens, held from the build) and, where E is not a multiple of 64, the router weight's
        zero-padded copy [E_pad, H] bf16 (every path: held from the first call that reads it; refilled
        by each, so calls of one layer on two streams at once must not change the weights between
        them) and path "fused"'s dWr rows [E_pad, H] fp32 (held from its first backward given `out`:
        counted whether or not one is) and, under token dropping with an aux loss, the aux loss's
        pair counts [E + 1] int32 (every backward's, held from the first);
        `forward_context`, what one forward at max_tokens keeps for its
        backward (the host paths': from CuPy's pool, until the context is dropped; the device paths':
        held by the layer from the first forward, every forward's in the same buffers; the dispatch
        arena it also points into is in the heaps); `launch_buffers`, path "fused"'s launches' outputs, held from their
        first call to close() (launch_buffer_bytes; one backward's, or one per wgrad dtype used)."""
        heaps = sum(plan.heap.nbytes for plan in (self._dispatch, self._combine, getattr(self, "_dispatch_bwd", None))
                    if getattr(plan, "heap", None) is not None)
        routing_held = 0  # the layer's HeldBuffers under "routing"
        if self._router_pad != self.cfg.experts:
            routing_held = self._router_pad * self.cfg.hidden * (2 + 4 * (self.path == "fused"))
        if self.cfg.capacity_factor and self.cfg.aux_loss_coef:
            routing_held += 4 * (self.cfg.experts + 1)
        return {"symmetric_heaps": int(heaps),
                "routing": (self._routing.nbytes if getattr(self, "_routing", None) is not None else 0) + routing_held,
                "forward_context": context_bytes(self.cfg, self.capacity_rows, self.max_tokens, self._router_pad,
                                                 expert_rows_copied=self.path in ("serial", "baseline"),
                                                 expert_outputs_kept=self.path == "device"),
                "launch_buffers": launch_buffer_bytes(self.cfg, self.capacity_rows, self.max_tokens, self._router_pad,
                                                      max(1, len(self._backwards))) if self.path == "fused" else 0}

    # ---- checks ----
    def _check_params(self, p: MoEParams) -> MoEParams:
        """p with every array as a checked CuPy array (any GPU array goes in)."""
        cfg, h, i = self.cfg, self.cfg.hidden, self.cfg.intermediate
        want = {"router_w": ((cfg.experts, h), bfloat16), "w1": ((self.e_loc, 2 * i, h), bfloat16),
                "w2": ((self.e_loc, h, i), bfloat16)}
        if cfg.expert_bias:
            want["bias"] = ((cfg.experts,), float32)
        if cfg.shared:
            want["shared_w1"] = ((2 * cfg.shared_width, h), bfloat16)
            want["shared_w2"] = ((h, cfg.shared_width), bfloat16)
        if p.bias is not None and not cfg.expert_bias:
            raise ValueError("MoEParams.bias given but the config has expert_bias = False")
        checked = {}
        for name, (shape, dt) in want.items():
            a = getattr(p, name)
            if a is None:
                raise ValueError(f"MoEParams.{name} is missing (the config needs it)")
            a = check_array(a, name, dtypes=(dt,), device=self.world.device_id)
            if tuple(a.shape) != shape:
                raise ValueError(f"MoEParams.{name} must be {shape}, got {tuple(a.shape)}")
            checked[name] = a
        return MoEParams(**{**{f: None for f in ("bias", "shared_w1", "shared_w2")}, **checked})

    # ---- the forward ----
    @uses_stream
    def forward(self, x: Any, params: MoEParams, *, check: bool = False,
                stream: Any = None) -> tuple[Any, MoEContext]:
        """y [T, H] bf16 and the context (ctx.routing.losses: the aux and z losses; under token
        dropping ctx.routing.dropped counts this rank's dropped pairs, ctx.routing.kept marks the
        others). A routing past capacity_rows: the serial path raises on every rank; the device path
        moves nothing and returns NaN (check=True: a host sync, then it raises)."""
        import cupy

        cfg, P, rank, k = self.cfg, self.P, self.world.rank, self.cfg.top_k
        err = None
        try:
            x = check_array(x, "x", dtypes=(bfloat16,), device=self.world.device_id, stream=stream)
            if x.ndim != 2 or x.shape[1] != cfg.hidden or x.shape[0] > self.max_tokens:
                raise ValueError(f"x must be [T <= {self.max_tokens}, {cfg.hidden}], got {tuple(x.shape)}")
            params = self._check_params(params)
        except Exception as e:  # noqa: BLE001 - a refusal on one rank reaches every rank
            err = e
        all_ok(self.world.comm, err)
        t = int(x.shape[0])

        # 1. route (path "fused": inside its launch)
        in_launch = self.path == "fused"
        logits, r = (self._routing.logits[:t], None) if in_launch else self._route(x, params)
        if self.path in ("device", "fused"):
            y, ctx = self._forward_device(x, params, r)
            ctx.x, ctx.logits, ctx.calls = x, logits, (self._dispatch.epoch, self._combine.epoch)
            if check:
                worst = int(self._dispatch.status.get()[0])
                if worst:
                    raise ValueError(f"the routing sends a rank {worst} rows, past capacity_rows = "
                                     f"{self.capacity_rows}: nothing was moved, the output is NaN")
            return y, ctx

        # 2. dispatch: counts through MPI (the serial path's one host round trip), rows by AllToAll
        counts = cupy.asnumpy(r.counts).astype(np.int64)            # [E] this rank's rows per expert
        per_owner = counts.reshape(P, self.e_loc)
        send_counts = per_owner.sum(axis=1)
        all_counts = np.asarray(self.world.comm.allgather(counts))  # [P sources, E]
        mine = all_counts[:, rank * self.e_loc:(rank + 1) * self.e_loc]  # [P, E/P] rows from s for e
        received = int(mine.sum())
        most = int(all_counts.reshape(P, P, self.e_loc).sum(axis=(0, 2)).max())  # every owner's rows: same everywhere
        if most > self.capacity_rows:
            raise ValueError(f"the routing sends a rank {most} rows, past capacity_rows = {self.capacity_rows}: "
                             f"nothing was moved (raise capacity_rows, or route more evenly)")
        tokens = (r.order[:int(counts.sum())] // k).astype(cupy.int64)  # the kept pairs' rows
        x_sent = _u16(x)[tokens].view(bfloat16) if t else cupy.empty((0, cfg.hidden), bfloat16)
        rows_a2a = self._nccl.all_to_all_rows if self.path == "baseline" else self._dispatch
        x_recv, recv_counts = rows_a2a(x_sent, send_counts.tolist())

        # expert-major at the owner: expert e's rows from source 0, then 1, ...
        src_start = np.concatenate([[0], np.cumsum(mine.sum(axis=1))])        # [P + 1] in x_recv
        in_src = np.concatenate([np.zeros((P, 1), np.int64), np.cumsum(mine, axis=1)], axis=1)  # [P, E/P + 1]
        pieces = [np.arange(src_start[s] + in_src[s, e], src_start[s] + in_src[s, e + 1])
                  for e in range(self.e_loc) for s in range(P)]
        expert_major = cupy.asarray(np.concatenate(pieces) if pieces else np.zeros(0, np.int64))
        group_rows = cupy.asarray(mine.sum(axis=0).astype(np.int32))

        # 3. the expert GEMMs
        h_cols, hid = cfg.intermediate, cfg.hidden
        if received:
            # capacity-sized operands: one grouped plan whatever arrives (rows past the counts unread)
            x_e = cupy.empty((self.capacity_rows, hid), np.uint16)
            x_e[:received] = _u16(x_recv)[expert_major]
            x_e = x_e.view(bfloat16)
            gate_up = cupy.empty((self.capacity_rows, 2 * h_cols), bfloat16)  # kept for the backward
            if self.path == "baseline":
                hmid, y_e = self._experts_per_expert(x_e, params, mine.sum(axis=0), gate_up)
            else:
                hmid = grouped.grouped_matmul(x_e, params.w1, group_rows, "TN", epilogue="swiglu", gate_up=gate_up)
                y_e = grouped.grouped_matmul(hmid, params.w2, group_rows, "TN")
            y_recv = cupy.empty((received, hid), bfloat16)
            _u16(y_recv)[expert_major] = _u16(y_e)[:received]
        else:
            x_e = cupy.empty((0, hid), bfloat16)
            hmid = cupy.empty((0, h_cols), bfloat16)
            gate_up = cupy.empty((0, 2 * h_cols), bfloat16)
            y_recv = cupy.empty((0, hid), bfloat16)

        # 4. combine and fold
        y_back, _ = (self._nccl.all_to_all_rows if self.path == "baseline" else self._combine)(
            y_recv, recv_counts.tolist())  # rows in this rank's dispatch order
        acc = cupy.zeros((t, hid), float32)
        kept = ()
        if t:
            acc += (_pair_rows(y_back, r, t) * r.weights[:, :, None]).sum(axis=1)
            shared, kept = self._shared(x, params)
            if shared is not None:
                acc += shared
        y = f32_to_bf16(acc)
        ctx = MoEContext(r, send_counts, np.asarray(recv_counts), group_rows, expert_major, x_e, hmid, x=x,
                         logits=logits, gate_up=gate_up, shared=kept, combined=y_back)
        return y, ctx

    def _experts_per_expert(self, x_e: Any, params: MoEParams, rows: np.ndarray, gate_up: Any) -> tuple[Any, Any]:
        """The baseline's expert GEMMs: cuBLAS (cupy.matmul) per expert, SwiGLU in fp32 between;
        gate_up receives the pre-activations (bf16) for the backward."""
        import cupy

        f, hid = self.cfg.intermediate, self.cfg.hidden
        hmid = cupy.empty((x_e.shape[0], f), bfloat16)
        y_e = cupy.empty((x_e.shape[0], hid), bfloat16)
        lo = 0
        for e, n in enumerate(int(v) for v in rows):
            if n:
                pre_16 = cupy.matmul(x_e[lo:lo + n], params.w1[e].T)
                _u16(gate_up)[lo:lo + n] = _u16(pre_16)
                pre = bf16_to_f32(pre_16)
                _u16(hmid)[lo:lo + n] = _u16(f32_to_bf16(silu(cupy, pre[:, :f]) * pre[:, f:]))
                cupy.matmul(hmid[lo:lo + n], params.w2[e].T, out=y_e[lo:lo + n])
            lo += n
        return hmid, y_e

    def _route(self, x: Any, params: MoEParams) -> tuple[Any, DeviceRouting]:
        """The router GEMM (fp32 logits, padded to the builder's 64-column tiles) and the routing."""
        import cupy

        cfg = self.cfg
        if x.shape[0]:  # whole tiles and the K splits of the fused launch's router GEMM: the same bits
            splits = router_splits(int(x.shape[0]), self._router_pad, cfg.hidden)
            logits = gemm.matmul(x, self._padded_router_w(params), "TN", out_dtype=float32, stream_k=False,
                                 split_k=splits)
        else:
            logits = cupy.empty((0, self._router_pad), float32)
        return logits, route(logits, cfg, params.bias)

    def _padded_router_w(self, params: MoEParams) -> Any:
        """router_w [E, H] with zero rows up to the GEMM's 64-row multiple (their logits are zero and
        never read): router_w itself when E is a multiple of 64 (DeepSeek-V3, Qwen3: no copy), else a
        copy into a held buffer (one address from call to call: the backward's memo keeps hitting;
        see memory())."""
        if self._router_pad == self.cfg.experts:
            return params.router_w
        wr = self._held("router_w_padded", (self._router_pad, self.cfg.hidden), np.uint16, zeroed=True)
        wr[:self.cfg.experts] = _u16(params.router_w)  # the weights may have changed in place since the last call
        return wr.view(bfloat16)

    def _shared(self, x: Any, params: MoEParams, held: bool = False) -> tuple[Any, tuple]:
        """The shared MLP's output in fp32 (added to the fold before its one rounding), or None,
        and what its backward reads: (h, gate_up); held (the device path): those two in the
        layer's buffers (self._held)."""
        import cupy

        t, sw = int(x.shape[0]), self.cfg.shared_width
        if not self.cfg.shared or t == 0:
            return None, ()
        if held:
            gate_up = self._held("shared_gate_up", (self.max_tokens, 2 * sw), bfloat16, t)
            h = self._held("shared_h", (self.max_tokens, sw), bfloat16, t)
        else:
            gate_up, h = cupy.empty((t, 2 * sw), bfloat16), None
        h = gemm.matmul(x, params.shared_w1, "TN", epilogue="swiglu", gate_up=gate_up, out=h)
        # whole tiles, as the fused launch's jobs: the same bits
        return gemm.matmul(h, params.shared_w2, "TN", out_dtype=float32, stream_k=False), (h, gate_up)

    def _forward_device(self, x: Any, params: MoEParams, r: DeviceRouting | None) -> tuple[Any, MoEContext]:
        """Dispatch, expert GEMMs on the arena, combine + fold: no host round trip. GEMM1's epilogue
        keeps the pre-activations [gate, up] for the backward (which then recomputes nothing).
        r None (path "fused"): the launch routes x first."""
        cfg, t, cap = self.cfg, int(x.shape[0]), self.capacity_rows
        gate_up = self._held("gate_up", (cap, 2 * cfg.intermediate), bfloat16)
        if self.path == "fused":  # the shared MLP inside the launch
            router = {} if r is not None else {"router_w": params.router_w, "bias": params.bias}
            shared, kept = None, ()
            if cfg.shared and t:
                sw = cfg.shared_width
                kept = (self._held("shared_h", (self.max_tokens, sw), bfloat16, t),
                        self._held("shared_gate_up", (self.max_tokens, 2 * sw), bfloat16, t))
                shared = SharedMLP(params.shared_w1, params.shared_w2, *kept)
            y, hmid = self._forward(x, self._routing if r is None else r, params.w1, params.w2, gate_up=gate_up,
                                     shared=shared, movers=self.movers, crew=self.crew, **router)
            if r is None:
                r = self._routing.routing(int(x.shape[0]))
            x_e, group_rows = self._dispatch.arena.local.view(bfloat16), self._dispatch.group_rows
            y_e = self._forward.y_experts
        else:
            shared, kept = self._shared(x, params, held=True)
            arena, group_rows, _ = self._dispatch(x, r)
            x_e = arena.view(bfloat16)  # [capacity, H]: rows past the counts are not read
            hmid = grouped.grouped_matmul(x_e, params.w1, group_rows, "TN", epilogue="swiglu", gate_up=gate_up,
                                          out=self._held("h", (cap, cfg.intermediate), bfloat16))
            y_e = grouped.grouped_matmul(hmid, params.w2, group_rows, "TN",
                                         out=self._held("y_e", (cap, cfg.hidden), bfloat16))
            y = self._combine(y_e, self._dispatch, r, shared=shared, own_in_place=True)
        # x_e is the dispatch arena, y_e (path fused) the launch's: valid until the next forward
        return y, MoEContext(r, None, None, group_rows, None, x_e, hmid, gate_up=gate_up, shared=kept, y_experts=y_e)

    # ---- the backward ----
    @uses_stream
    def backward(self, dy: Any, ctx: MoEContext, params: MoEParams, *, wgrad_dtype: Any = float32,
                 out: MoEGradients | None = None, stream: Any = None) -> MoEGradients:
        """Gradients of sum(dy * y) + aux + z for the forward that made `ctx` (device and fused
        paths: call it before the next forward, once: ctx holds the forward's dispatch arena and
        combine buffer). wgrad_dtype: the experts' weight gradients (routed and shared) in float32
        (for an fp32 master-weight optimiser) or bfloat16 (the same accumulators rounded once: half
        the bytes); the router's stays float32. out: an MoEGradients of the caller's buffers (dx
        [T, H] bf16, d_router_w [E, H] fp32, the weights' in wgrad_dtype, the shared pair None
        without a shared expert), overwritten and returned: no allocation a step, and path "fused"'s
        argument memo sees the same addresses every step.

        Device paths, separate launches: the dY rows to the experts' owners, each weighted by its
        routing weight as it is pushed (MoEDispatch, its own arena); wgrad2 (grouped NT) and dgrad2
        with the SwiGLU backward in its epilogue (grouped NN, on the forward's kept
        pre-activations); wgrad1 and dgrad1; the rows back and summed per token (MoECombine, with the
        router's and the shared experts' dx added in fp32 before the one rounding). The serial and
        baseline paths move the same rows as their forward does (kosmos AllToAll or NCCL, counts
        from the forward) and run the experts' backward with our grouped GEMMs (serial) or
        cupy.matmul per expert (baseline: bf16 products, so its dW carry bf16 precision whatever
        wgrad_dtype). The router gradients come from each pair's expert output in fp32."""
        import cupy

        cfg = self.cfg
        device = self.path in ("device", "fused")
        err = None
        try:
            if ctx.x is None:
                raise ValueError("ctx is not a context of MoELayer.forward")
            # ctx points into the device plans' arena and combine buffer: only the last forward's, once
            if device and ctx.calls != (self._dispatch.epoch, self._combine.epoch):
                raise ValueError("backward needs the context of this layer's last forward, once: another "
                                 "forward or backward has run since (its arena and combine buffer are reused)")
            t = int(ctx.x.shape[0])
            dy = check_array(dy, "dy", dtypes=(bfloat16,), device=self.world.device_id, stream=stream)
            if dy.shape != (t, cfg.hidden):
                raise ValueError(f"dy must be [{t}, {cfg.hidden}] bf16 (the forward's y), got {tuple(dy.shape)}")
            params = self._check_params(params)
            wdt = np.dtype(wgrad_dtype)
            if wdt not in (np.dtype(float32), np.dtype(bfloat16)):
                raise TypeError(f"wgrad_dtype must be float32 or bfloat16, got {wdt}")
            into = None  # out, checked (CuPy views of the caller's buffers)
            if out is not None:
                weights = {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}  # (asdict copies)
                key = None
                if isinstance(out, MoEGradients):  # (None for a foreign array: the checks wrap it)
                    key = call_signature(*(getattr(out, f.name) for f in dataclasses.fields(out)), dy, ctx.x,
                                         *weights.values(), wgrad=wdt.str)
                if self._checked_outs.get(key):
                    into = out
                else:
                    into = self._checked_gradients(out, t, wdt, stream, dy=dy, x=ctx.x, **weights)
                    self._checked_outs.put(key, True)
        except Exception as e:  # noqa: BLE001 - a refusal on one rank reaches every rank
            err = e
        all_ok(self.world.comm, err)
        r = ctx.routing
        bwd = _backward_kernels(self.world)
        # A device-path forward whose dispatch overflowed moved nothing (its y is NaN): NaN gradients
        # too, decided on the device (no host sync). The host paths raised in their forward instead.
        status = self._dispatch.status if device else cupy.zeros((1,), cupy.int64)
        # 1. the router's gradients: each pair's combine weight gradient from its expert output (the device
        #    paths' combine buffer -- before anything else reuses it -- and, for this rank's own rows, the
        #    forward's expert outputs; or the host paths' returned rows), d logits, then its dx (the fold's fp32
        #    addend) and dWr; 2. the shared experts' gradients (their dx joins the router's); 3. the routed
        #    experts' weight gradients and dX rows; 4. the rows back to their tokens, summed (weights 1: dY was
        #    weighted), plus the rest, rounded once. Path "fused": all in one launch.
        if self.path == "fused":
            dx, dw1, dw2, d_sw1, d_sw2, d_router_w = self._fused_backward(dy, ctx, params, wdt, status, into)
        else:
            extra, d_router_w = self._router_gradients(ctx, dy, status, params)
            d_sw1, d_sw2 = self._shared_backward(dy, ctx, params, wdt, extra)
            if device:
                d_xe, dw1, dw2 = self._routed_backward_device(dy, ctx, params, wdt)
                ones = dataclasses.replace(r, weights=cupy.ones_like(r.weights))
                dx = self._combine(d_xe, self._dispatch_bwd, ones, shared=extra if t else None, own_in_place=True)
            else:
                d_back, dw1, dw2 = self._routed_backward_exchanged(dy, ctx, params, wdt)
        if device:
            nan_word = {np.dtype(float32): np.uint32(0x7FC00000), np.dtype(bfloat16): np.uint32(0x7FC07FC0)}
            # NaN after a failed dispatch, in place (a where + astype was 3 passes over GBs); the fused
            # launch's shared MLP and router jobs did not run then either
            fused = () if self.path != "fused" else (d_router_w, d_sw1, d_sw2) if cfg.shared else (d_router_w,)
            for dw in (dw1, dw2, *fused):  # one fp32 or two bf16 NaNs a word
                bwd("kosmos_moe_nan_if_failed")((264,), (256,), (status, dw, np.uint64(dw.nbytes // 4),
                                                                 nan_word[dw.dtype]))
        else:
            acc = extra
            if t:
                acc = acc + _pair_rows(d_back, r, t).sum(axis=1)
            dx = f32_to_bf16(acc)
        grads = MoEGradients(dx, d_router_w, dw1, dw2, d_sw1, d_sw2)
        if into is None:
            return grads
        for f in dataclasses.fields(MoEGradients):  # what a path computed elsewhere (path fused: d_router_w
            got, given = getattr(grads, f.name), getattr(into, f.name)  # when E is not a multiple of 64)
            if got is not None and got.data.ptr != given.data.ptr:
                copy_into(given, got)
        return out

    def _checked_gradients(self, out: MoEGradients, t: int, wdt: np.dtype, stream: Any, **inputs: Any) -> MoEGradients:
        """backward's `out`, checked: each buffer this rank's, writable, contiguous, of its shape and
        dtype (see backward), disjoint from the inputs and from the others."""
        if not isinstance(out, MoEGradients):
            raise TypeError(f"out must be an MoEGradients, got {type(out).__name__}")
        cfg, h, i = self.cfg, self.cfg.hidden, self.cfg.intermediate
        want = {"dx": ((t, h), bfloat16), "d_router_w": ((cfg.experts, h), float32),
                "dw1": ((self.e_loc, 2 * i, h), wdt), "dw2": ((self.e_loc, h, i), wdt)}
        if cfg.shared:
            want.update(d_shared_w1=((2 * cfg.shared_width, h), wdt), d_shared_w2=((h, cfg.shared_width), wdt))
        checked: dict[str, Any] = {"d_shared_w1": None, "d_shared_w2": None}
        for name, (shape, dt) in want.items():
            if getattr(out, name) is None:
                raise ValueError(f"out.{name} is missing (a {list(shape)} {dtype_name(np.dtype(dt))} buffer)")
            checked[name] = gemm.output_array(getattr(out, name), shape, np.dtype(dt), name=f"out.{name}",
                                              device=self.world.device_id, stream=stream, **inputs, **checked)
        if not cfg.shared and (out.d_shared_w1 is not None or out.d_shared_w2 is not None):
            raise ValueError("out.d_shared_w1 / d_shared_w2 given, but the config has no shared expert")
        return MoEGradients(**checked)

    def _fused_backward(self, dy: Any, ctx: MoEContext, params: MoEParams, wdt: np.dtype, status: Any,
                        out: MoEGradients | None) -> tuple:
        """(dx, dW1, dW2, dW1_s, dW2_s, dWr) of path "fused": MoEBackward, the router's backward and
        the shared MLP's jobs included. Every output is passed in -- the caller's `out`, else
        allocated here -- so a call like an earlier one (the same buffers, or CuPy's pool handing a
        steady caller the same blocks) skips MoEBackward's checks (its argument memo). dWr is the
        first E rows of an [E_pad, H] buffer: out.d_router_w itself where E_pad = E, else a held one
        (backward copies its rows into out's)."""
        import cupy

        cfg, t = self.cfg, int(dy.shape[0])
        if wdt not in self._backwards:
            self._backwards[wdt] = MoEBackward(self._dispatch_bwd, self._combine, wdt)
        padded = (self._router_pad, cfg.hidden)
        if out is None:
            out = MoEGradients(cupy.empty((t, cfg.hidden), bfloat16), cupy.empty(padded, float32),
                               cupy.empty(params.w1.shape, wdt), cupy.empty(params.w2.shape, wdt),
                               *((cupy.empty(params.shared_w1.shape, wdt), cupy.empty(params.shared_w2.shape, wdt))
                                 if cfg.shared else ()))
        elif self._router_pad != cfg.experts:
            out = dataclasses.replace(out, d_router_w=self._held("d_router_w_padded", padded, float32))
        outputs = {"out": out.dx, "dw1": out.dw1, "dw2": out.dw2, "d_router_w": out.d_router_w}  # dWr NaN if failed
        shared = {}
        if cfg.shared:
            h_s, gate_up_s = ctx.shared or (None, None)  # () when this rank has no tokens
            shared = {"shared": SharedMLP(params.shared_w1, params.shared_w2, h_s, gate_up_s),
                      "dw1_shared": out.d_shared_w1, "dw2_shared": out.d_shared_w2}
        router = RouterBackward(self.cfg, ctx.logits, self._padded_router_w(params), status, self._aux_starts(ctx),
                                own_y=ctx.y_experts, own_runs=self._combine.own_runs)
        g = self._backwards[wdt](dy, ctx.routing, ctx.x_experts, ctx.h, ctx.gate_up, params.w1, params.w2,
                                 router=router, x=ctx.x, movers=self.movers, crew=self.crew, **outputs, **shared)
        return g.dx, g.dw1, g.dw2, g.dw1_shared, g.dw2_shared, g.d_router_w

    def _routed_backward_device(self, dy: Any, ctx: MoEContext, params: MoEParams, wdt: np.dtype) -> tuple:
        """(dX rows expert-major in the backward's arena, dW1, dW2) of the device paths."""
        # the dY rows to the experts' owners, each times its pair's routing weight as it is pushed
        arena, rows, _ = self._dispatch_bwd(dy, ctx.routing, weighted=True)
        d_ye = arena.view(bfloat16)                                                   # [cap, H]
        x_e, a = ctx.x_experts, ctx.h
        dw2 = grouped.grouped_matmul(d_ye, a, rows, "NT", out_dtype=wdt)               # [E/P, H, I]
        # d[gate, up] [cap, 2I] from dA = dY W2's fp32 accumulators and the forward's kept [gate, up]
        # (bf16: the values a TN GEMM would store); rows past the groups' are not written (nor read)
        d_pre = grouped.grouped_matmul(d_ye, params.w2, rows, "NN", epilogue="swiglu_backward", gate_up=ctx.gate_up)
        dw1 = grouped.grouped_matmul(d_pre, x_e, rows, "NT", out_dtype=wdt)            # [E/P, 2I, H]
        d_xe = grouped.grouped_matmul(d_pre, params.w1, rows, "NN")                    # [cap, H]
        return d_xe, dw1, dw2

    def _routed_backward_exchanged(self, dy: Any, ctx: MoEContext, params: MoEParams, wdt: np.dtype) -> tuple:
        """(dX rows in this rank's dispatch order, dW1, dW2) of the serial and baseline paths: the
        weighted dY rows out and the dX rows back as the forward moved its rows."""
        import cupy

        r, k, hid, f = ctx.routing, self.cfg.top_k, self.cfg.hidden, self.cfg.intermediate
        t = int(dy.shape[0])
        baseline = self.path == "baseline"
        out_a2a = self._nccl.all_to_all_rows if baseline else self._dispatch
        back_a2a = self._nccl.all_to_all_rows if baseline else self._combine
        if t:  # dispatch-order row i is pair order[i] (token order[i] // k), weighted as the forward's fold
            order = r.order[:int(ctx.send_counts.sum())].astype(cupy.int64)  # the kept pairs
            d_sent = f32_to_bf16(bf16_to_f32(dy)[order // k] * r.weights.ravel()[order][:, None])
        else:
            d_sent = cupy.empty((0, hid), bfloat16)
        d_recv, _ = out_a2a(d_sent, ctx.send_counts.tolist())
        received = int(d_recv.shape[0])
        rows_host = cupy.asnumpy(ctx.group_rows).astype(np.int64)
        dw1, dw2 = _zeros((self.e_loc, 2 * f, hid), wdt), _zeros((self.e_loc, hid, f), wdt)
        d_xe = cupy.empty((received, hid), bfloat16)
        if received:
            d_ye = cupy.empty((self.capacity_rows, hid), np.uint16)
            d_ye[:received] = _u16(d_recv)[ctx.expert_major]
            d_ye = d_ye.view(bfloat16)
            x_e, a = ctx.x_experts, ctx.h
            if baseline:  # cuBLAS per expert (bf16 out), the SwiGLU backward in fp32 on the kept pre
                from .reference import swiglu_backward

                def put(dst, prod):  # a bf16 product into a wgrad of wdt
                    if wdt == float32:
                        dst[...] = bf16_to_f32(prod)
                    else:
                        copy_into(dst, prod)

                d_xe_em = cupy.empty((received, hid), bfloat16)
                lo = 0
                for e, n in enumerate(int(v) for v in rows_host):
                    if n:
                        dye_e, xe_e = d_ye[lo:lo + n], x_e[lo:lo + n]
                        put(dw2[e], cupy.matmul(dye_e.T, a[lo:lo + n]))
                        d_a = bf16_to_f32(cupy.matmul(dye_e, params.w2[e]))
                        d_pre = f32_to_bf16(swiglu_backward(cupy, bf16_to_f32(ctx.gate_up[lo:lo + n]), d_a))
                        put(dw1[e], cupy.matmul(d_pre.T, xe_e))
                        _u16(d_xe_em)[lo:lo + n] = _u16(cupy.matmul(d_pre, params.w1[e]))
                    lo += n
            else:  # our grouped GEMMs, as the device path's
                rows = ctx.group_rows
                grouped.grouped_matmul(d_ye, a, rows, "NT", out=dw2)
                d_pre = grouped.grouped_matmul(d_ye, params.w2, rows, "NN", epilogue="swiglu_backward",
                                               gate_up=ctx.gate_up)
                grouped.grouped_matmul(d_pre, x_e, rows, "NT", out=dw1)
                d_xe_em = grouped.grouped_matmul(d_pre, params.w1, rows, "NN")
            _u16(d_xe)[ctx.expert_major] = _u16(d_xe_em)[:received]  # back to the received order
        d_back, _ = back_a2a(d_xe, ctx.recv_counts.tolist())  # rows in this rank's dispatch order
        return d_back, dw1, dw2

    def _router_gradients(self, ctx: MoEContext, dy: Any, status: Any, params: MoEParams) -> tuple[Any, Any]:
        """(the router's dx [T, H] fp32, dWr [E, H] fp32): each pair's d w from its expert output and
        the token's d logits in one kernel (hipsrc/kosmos/moe/router_grads.h; bf16 [T, E_pad], the
        experts padded to the GEMM's 64 columns with zeros: x and Wr are bf16 already), then our
        GEMMs with fp32 outputs, whole tiles (the fused launch's jobs: the same bits)."""
        import cupy

        cfg, x, r = self.cfg, ctx.x, ctx.routing
        t = int(x.shape[0])
        if not t:
            return cupy.zeros((0, cfg.hidden), float32), cupy.zeros((cfg.experts, cfg.hidden), float32)
        comb = self._combine.comb.local if self.path == "device" else ctx.combined
        own = {"own_y": ctx.y_experts, "own_runs": self._combine.own_runs} if self.path == "device" else {}
        d_logits = cupy.empty((t, self._router_pad), bfloat16)
        launch_router_grads(router_grads_record(
            cfg, logits=ctx.logits, chosen=r.experts, start=self._aux_starts(ctx), hidden=cfg.hidden, comb=comb, slot=r.slot, dy=dy,
            status=status, d_logits=d_logits, **own), _backward_kernels(self.world))
        dx = gemm.matmul(d_logits, self._padded_router_w(params), "NN", out_dtype=float32, stream_k=False)
        d_router_w = gemm.matmul(d_logits, x, "NT", out_dtype=float32, stream_k=False)[:cfg.experts]
        return dx, d_router_w

    def _aux_starts(self, ctx: MoEContext) -> Any:
        """The aux loss's chosen pairs per expert as an [E + 1] prefix: the routing's own unless it
        dropped pairs (then counted apart, into a held buffer; without an aux loss nothing reads them)."""
        r, e = ctx.routing, self.cfg.experts
        if r.kept is None or not self.cfg.aux_loss_coef:
            return r.start
        return pair_starts(r.experts, e, out=self._held("aux_starts", (e + 1,), np.int32))

    def _shared_backward(self, dy: Any, ctx: MoEContext, params: MoEParams, wdt: np.dtype, extra: Any) -> tuple:
        """(dW1, dW2) of the shared MLP (None without it), as the routed experts' (the forward's h
        and [gate, up]); its dx is added to `extra` [T, H] fp32 in place."""
        cfg = self.cfg
        if not cfg.shared:
            return None, None
        # zeros stay where the rank has no tokens
        d_sw1 = _zeros((2 * cfg.shared_width, cfg.hidden), wdt)
        d_sw2 = _zeros((cfg.hidden, cfg.shared_width), wdt)
        if ctx.shared:
            a_s, gate_up_s = ctx.shared
            # whole tiles, as the fused launch's jobs: the same bits
            gemm.matmul(dy, a_s, "NT", out=d_sw2, stream_k=False)
            d_pre_s = gemm.matmul(dy, params.shared_w2, "NN", epilogue="swiglu_backward", gate_up=gate_up_s)
            gemm.matmul(d_pre_s, ctx.x, "NT", out=d_sw1, stream_k=False)
            gemm.matmul(d_pre_s, params.shared_w1, "NN", out=extra, epilogue="accumulate")  # extra += dx_s
        return d_sw1, d_sw2
