"""Grouped GEMMs over ragged groups (the MoE expert GEMMs): ``grouped_matmul(a, b, group_rows, layout)``.

Rows of every group are packed one group after another (expert-major); group e owns the rows
[start_e, start_e + group_rows[e]) with start_e = group_rows[0] + ... + group_rows[e-1]. The counts
are an int32 device array read by the kernel itself (no host round trip: a MoE layer can feed it
from its own routing), any count zero included, summing to at most the packed rows R.

    TN  Y[r]  = X[r] @ W[e]^T  (r in group e)  grouped_matmul(X[R,K], W[E,N,K], rows, "TN") -> [R,N]
    NN  dX[r] = dY[r] @ W[e]                    grouped_matmul(dY[R,N], W[E,N,K], rows, "NN") -> [R,K]
    NT  dW[e] = dY_e^T @ X_e                    grouped_matmul(dY[R,N], X[R,K], rows, "NT") -> [E,N,K]

``epilogue="swiglu"`` (TN): W[e] holds [gate; up] rows (2F) and the output is silu(gate) * up, [R, F];
``gate_up`` [R, 2F] (optional) keeps the pre-activations. ``epilogue="swiglu_backward"`` (NN): dA =
dY W2[e] and, from the kept ``gate_up`` (required), the output [dGate, dUp], [R, 2F] (kosmos.gemm).
Rows of Y / dX past the counts' sum are not written. In NT the reduction runs over each group's rows
only (a group with no rows gives dW[e] = 0), whatever the packed arrays hold past a group's end.

One persistent launch over every group's tiles (128x256 or, for few tiles, 128x192 or 128x128
builder tiles, chosen by gemm.choose_tile_n; one CTA per SM or sm_cap);
bitwise reproducible for a given shape and counts. Bad counts (negative, or summing past R) make the
kernel compute nothing and leave the output as it was; with ``check=True`` the call waits for the
kernel and raises ValueError naming the count. Without it nothing is reported (no host round trip;
a MoE layer validates its routing on the device).
"""
from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import gemm
from .arrays import check_array
from .gemm import LAYOUTS
from .runtime.call_cache import CallCache, call_signature, remember
from .runtime.streams import DeviceOrder, uses_stream

EPILOGUES = ("store", "swiglu", "swiglu_backward")  # (no "accumulate" here yet: kosmos.matmul has it)


def max_groups() -> int:
    """Groups one launch takes (kMaxGroups in hipsrc/kosmos/gemm/schedule.h)."""
    return gemm.device_constants()["kMaxGroups"]


# ---------------------------------------------------------------- host logic (no GPU needed)
@dataclass(frozen=True)
class GroupedShape:
    layout: str
    groups: int
    rows: int        # packed rows R of the operands
    mo: int          # Problem dims: TN/NN output rows (R); NT one group's output rows (N)
    no: int          # output columns (2F under SwiGLU)
    kr: int          # reduction depth (TN/NN); NT: the group's rows, from the counts
    out_shape: tuple[int, ...]
    swiglu_f: int = 0
    epilogue: str = "store"

    def tiles(self, tile_n: int = 256) -> tuple[int, int, int]:
        """(tiles_m, tiles_n, k_slabs) of one group: tiles_m only for NT (TN/NN: from the counts),
        k_slabs only for TN/NN (NT: from the counts)."""
        tm, _, tk = gemm.tile_shape()
        tiles_n = gemm.tile_columns(self.no, self.swiglu_f, tile_n)
        if self.layout == "NT":
            return -(-self.mo // tm), tiles_n, 0
        return 0, tiles_n, -(-self.kr // tk)

    def tile_estimate(self, tile_n: int) -> int:
        """Tiles of a launch whose counts fill every packed row (exact for NT and balanced groups)."""
        tiles_m, tiles_n, _ = self.tiles(tile_n)
        if self.layout == "NT":
            return self.groups * tiles_m * tiles_n
        return -(-self.rows // gemm.tile_shape()[0]) * tiles_n

    def flops(self, total_rows: int) -> int:
        """Multiply-add FLOPs for `total_rows` rows over all groups."""
        if self.layout == "NT":
            return 2 * total_rows * self.mo * self.no
        return 2 * total_rows * self.no * self.kr


def grouped_shape(layout: str, a_shape: tuple[int, ...], b_shape: tuple[int, ...], groups: int,
                  epilogue: str = "store") -> GroupedShape:
    """Check a layout's operand shapes against `groups` groups; see the module docstring."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue must be one of {EPILOGUES}, got {epilogue!r}")
    if not 1 <= groups <= max_groups():
        raise ValueError(f"group_rows must have 1 to {max_groups()} groups, got {groups}")
    if len(a_shape) != 2:
        raise ValueError(f"a must be 2-D (packed rows), got shape {tuple(a_shape)}")
    rows = a_shape[0]
    if rows < 1:
        raise ValueError(f"a has {rows} rows; it needs at least one (the counts may still be zero)")
    tm = gemm.tile_shape()[0]
    if rows // tm + groups >= 2**16:  # the device's u16 tile-row prefix
        raise ValueError(f"a has {rows} rows: one launch takes fewer than {(2**16 - groups) * tm}")
    if layout == "NT":
        if len(b_shape) != 2 or b_shape[0] != rows:
            raise ValueError(f"NT needs a[R,N] and b[R,K] with the same R; got {tuple(a_shape)} and {tuple(b_shape)}")
        n, k = a_shape[1], b_shape[1]
        mo, no, kr, out = n, k, 0, (groups, n, k)
    else:
        if len(b_shape) != 3 or b_shape[0] != groups:
            raise ValueError(f"{layout} needs b[E,...] with E = {groups} groups (len(group_rows)); got {tuple(b_shape)}")
        if layout == "TN":  # Y[r] = X[r] W[e]^T: a[R,K], b[E,N,K]
            n, k = b_shape[1], a_shape[1]
            if b_shape[2] != k:
                raise ValueError(f"TN needs a[R,K] and b[E,N,K] with the same K; got {tuple(a_shape)} and {tuple(b_shape)}")
            mo, no, kr, out = rows, n, k, (rows, n)
        else:  # NN: dX[r] = dY[r] W[e]: a[R,N], b[E,N,K]
            n, k = a_shape[1], b_shape[2]
            if b_shape[1] != n:
                raise ValueError(f"NN needs a[R,N] and b[E,N,K] with the same N; got {tuple(a_shape)} and {tuple(b_shape)}")
            mo, no, kr, out = rows, k, n, (rows, k)
    for what, v in (("N", n), ("K", k)):
        if v < 64 or v % 64:
            raise gemm._dim_error(what, v)
    cols, f = gemm.epilogue_columns(layout, epilogue, no, " per group")
    return GroupedShape(layout, groups, rows, mo, no, kr, out if epilogue == "store" else (rows, cols),
                        swiglu_f=f, epilogue=epilogue)


TILE_WIDTHS = gemm.TILE_WIDTHS  # the grouped kernels' tile configurations (hipsrc/grouped.hip): the GEMM's


def kernel_name(layout: str, epilogue: str, out_dtype: Any, tile_n: int = 256) -> str:
    if epilogue == "swiglu":
        return "kosmos_grouped_tn_swiglu"
    if epilogue == "swiglu_backward":
        return "kosmos_grouped_nn_swiglu_bwd"
    suffix = "f32" if out_dtype is not None and np.dtype(out_dtype) == np.float32 else "bf16"
    return f"kosmos_grouped_{layout.lower()}_{suffix}" + ("" if tile_n == 256 else f"_n{tile_n}")


def resolve_out_dtype(layout: str, out_dtype: Any, epilogue: str) -> np.dtype:
    dt = gemm.resolve_out_dtype(out_dtype, epilogue)
    if layout != "NT" and dt == np.float32:
        raise TypeError("grouped TN and NN write bf16; float32 outputs are for the wgrad (NT)")
    return dt


def status_message(status: int, counts: Any = None) -> str | None:
    """The kernel's status word as an error message (None when the counts were good)."""
    if status == 0:
        return None
    if status == 2**64 - 1:
        total = f" ({int(np.asarray(counts, dtype=np.int64).sum())})" if counts is not None else ""
        return f"group_rows sum{total} past the rows of the packed operands"
    e = status - 1
    got = f" ({int(counts[e])})" if counts is not None else ""
    return f"group_rows[{e}]{got} is negative"


# ---------------------------------------------------------------- device side
def _module():
    from .runtime.module import load_module

    return load_module("grouped.hip", extra_options=gemm._extra_options)


def kernel_head(shape: GroupedShape, a, b, out, tmaps: dict, tile_n: int, uses_tma: bool, gate_up=None) -> tuple:
    """The arguments every grouped kernel starts with, the fused MoE launches' too: the (a, b, out)
    tensor maps (cached in `tmaps`), the Problem and the epilogue's records (gate_up: the SwiGLU
    epilogues' pre-activations)."""
    prob = gemm.problem_record(a, b, shape.mo, shape.no, shape.kr, shape.tiles(tile_n), shape.swiglu_f, 1,
                               b.shape[1] * b.shape[2] if b.ndim == 3 else 0)
    epi = gemm.epi_record(out, out.size // out.shape[-1], shape.swiglu_f or shape.no, shape.epilogue, gate_up)
    tma_store = gemm.stores_through_tma(shape.epilogue, uses_tma)
    return (*gemm.operand_tmaps(tmaps, a, b, out, uses_tma, tma_store), prob, epi)


@dataclass
class GroupedPlan:
    """One compiled, launch-checked grouped GEMM for a (layout, epilogue, out dtype, shape, grid)."""

    shape: GroupedShape
    out_dtype: np.dtype
    kernel_name: str
    grid: int
    launch: Any
    words: Any  # cupy uint64[3]: queue head, CTAs out, status of the last launch
    uses_tma: bool = True
    tile_n: int = 256
    _tmaps: dict = field(default_factory=dict)
    _args: dict = field(default_factory=dict)  # args() by the arrays' addresses and shapes
    # The queue words are shared by every call, so calls run one after another on the device. An
    # order of its own, not the GPU's: no CTA waits on another, so beside a World's grid a call is
    # only slower, never deadlocked (GemmPlan._order says more).
    _order: DeviceOrder = field(default_factory=DeviceOrder)

    @property
    def tma_store(self) -> bool:
        return gemm.stores_through_tma(self.shape.epilogue, self.uses_tma)

    def args(self, a, b, group_rows, out, gate_up=None) -> tuple:
        key = gemm.args_key(a, b, out, gate_up)
        head = self._args.get(key)
        if head is None:  # (the memo holds no array: group_rows is this call's)
            head = kernel_head(self.shape, a, b, out, self._tmaps, self.tile_n, self.uses_tma, gate_up)
            remember(self._args, key, head)
        s = self.shape
        return (*head, group_rows, np.int32(s.groups), np.int32(s.rows), self.words)

    def __call__(self, a, b, group_rows, out, stream=None, gate_up=None) -> None:
        with self._order.lock:
            self._order.join(stream)
            self.launch(self.args(a, b, group_rows, out, gate_up), stream=stream)

    def status(self, stream=None) -> int:
        """The last launch's status word (waits for it)."""
        import cupy

        (stream or cupy.cuda.get_current_stream()).synchronize()
        return int(self.words[2].get())


# grouped_matmul's checked calls (kosmos.runtime.call_cache): the plan, output shape and dtype
_checked_calls = CallCache()
_plans: dict[tuple, GroupedPlan] = {}
_plans_lock = threading.Lock()


def get_plan(shape: GroupedShape, out_dtype: np.dtype, sm_cap: int | None = None,
             tile_n: int | None = None) -> GroupedPlan:
    import cupy

    from .runtime.launch import PersistentLaunch, sm_count

    dev = cupy.cuda.Device().id
    # $KOSMOS_HIPSRC: a plan holds its tree's kernels (runtime.source.kernel_tree: an in-process A/B)
    key = (shape, np.dtype(out_dtype).str, sm_cap, tile_n, dev, gemm._extra_options, os.environ.get("KOSMOS_HIPSRC"))
    with _plans_lock:
        plan = _plans.get(key)
    if plan is not None:
        return plan
    wgmma = gemm.arch_path() == "wgmma"
    epilogue = shape.epilogue
    gemm.check_tile_n(tile_n, epilogue, wgmma, TILE_WIDTHS)
    # The tile count is the device's to know: one CTA per SM (or the cap), and the tile width from
    # the count every packed row in use would give.
    grid = gemm.grid_size(sm_count(), sm_count(), sm_cap)
    if tile_n is None:
        widths = TILE_WIDTHS if wgmma and epilogue == "store" else (256,)
        tile_n = gemm.choose_tile_n({w: shape.tile_estimate(w) for w in widths}, grid)
    name = kernel_name(shape.layout, epilogue, out_dtype, tile_n)
    kern = _module().get_function(name)
    launch = PersistentLaunch.checked(kern, grid, gemm.block_threads(), gemm.shared_mem_bytes())
    plan = GroupedPlan(shape, np.dtype(out_dtype), name, grid, launch, words=cupy.zeros(3, dtype=cupy.uint64),
                       uses_tma=wgmma, tile_n=tile_n)
    with _plans_lock:
        _plans[key] = plan
    return plan


@uses_stream
def grouped_matmul(a, b, group_rows, layout: str = "TN", out=None, out_dtype=None, sm_cap: int | None = None, *,
                   epilogue: str = "store", gate_up=None, check: bool = False, tile_n: int | None = None,
                   stream=None):
    """Grouped GEMM over ragged groups in one launch; see the module docstring. Returns ``out``.
    ``tile_n``: 256, 192 or 128 (Hopper, store epilogues); None = gemm.choose_tile_n on the tiles
    every packed row would give."""
    import cupy

    key = None if check else call_signature(a, b, group_rows, out, gate_up, layout=layout, out_dtype=out_dtype,
                                            sm_cap=sm_cap, epilogue=epilogue, tile_n=tile_n,
                                            options=gemm._extra_options, tree=os.environ.get("KOSMOS_HIPSRC"))
    hit = _checked_calls.get(key)
    if hit is not None:  # these arrays and options passed every check below before
        plan, out_shape, dt = hit
        out = cupy.empty(out_shape, dtype=dt) if out is None else out
        plan(a, b, group_rows, out, stream=stream, gate_up=gate_up)
        return out
    if isinstance(layout, str):
        layout = layout.upper()
    dev = cupy.cuda.Device().id
    bf16 = gemm._bf16()
    a = check_array(a, "a", dtypes=(bf16,), device=dev, stream=stream)
    b = check_array(b, "b", dtypes=(bf16,), device=dev, stream=stream)
    group_rows = check_array(group_rows, "group_rows", dtypes=(np.dtype(np.int32),), device=dev, stream=stream)
    if group_rows.ndim != 1:
        raise ValueError(f"group_rows must be 1-D (one count per group), got shape {tuple(group_rows.shape)}")
    shape = grouped_shape(layout, a.shape, b.shape, int(group_rows.shape[0]), epilogue)
    out, dt = gemm.checked_output(out, out_dtype, shape.out_shape, epilogue, stream,
                                  functools.partial(resolve_out_dtype, layout), a=a, b=b, group_rows=group_rows)
    gate_up = gemm.gate_up_array(gate_up, shape, dev, stream, a=a, b=b, output=out, group_rows=group_rows)
    plan = get_plan(shape, dt, sm_cap, tile_n)
    plan(a, b, group_rows, out, stream=stream, gate_up=gate_up)
    _checked_calls.put(key, (plan, shape.out_shape, dt))
    if check:
        msg = status_message(plan.status(stream), group_rows.get())
        if msg:
            raise ValueError(f"grouped_matmul: {msg}; nothing was computed")
    return out
