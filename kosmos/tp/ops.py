"""The TP+SP fused ops (the paper's five and the MXFP8 row backward): plans built once per shape,
then called like functions.

    ag = AllGatherMatmul(world, m, n, k)            # Y[P*m, n] = allgather(X[m, k]) @ W[n, k]^T
    y = ag(x_shard, w)
    rs = MatmulReduceScatter(world, m, n, k)        # Y[m, n] = reduce_scatter(X[P*m, k] @ W[n, k]^T)
    y_shard = rs(x, w)
    dg = AllGatherMatmul(world, m, n, k, layout="NN")  # dX[P*m, k] = allgather(dY[m, n]) @ W[n, k]
    nnt = AllGatherMatmulNNNT(world, m, n, k)       # MXFP8: that dX and dW = allgather(dY)^T X, one launch
    bag = BulkAllGatherMatmul(world, m, n, k)       # X_full = allgather(X[m, k]) || dX = dY[P*m, n] @ W[n, k]
    brs = BulkReduceScatterMatmul(world, m, n, k)   # dX[m, k] = reduce_scatter(dXp[P*m, k]) || dW = dY^T X

m is the rows (tokens) per rank and must be a multiple of 128 (the GEMM tile); n and k are
multiples of 64. Every call is collective: all ranks call the same op in the same order.

MXFP8 (`precision="mxfp8"`, the all-gather ops): the gathered operand is a kosmos.mx.DeviceMX
(E4M3 codes + E8M0 scales, blocks along the gathered row for AG+TN / AG+NN, along its columns
for the bulk gather that feeds the wgrad); 33/64 of the bf16 bytes cross the links. Where
kosmos.matmul would keep that GEMM's A in MXFP8 (gemm.mx_a_path: Hopper, at most
gemm.mx_a_max_columns() output columns; AG+TN and AG+NN), the gathered array stays MXFP8 (movers
copy codes and scales) and the builders dequantize A in their registers, W permuted per 64-slab
on the stream first (`keeps_mx`): the result is bitwise kosmos.matmul of the gathered MXFP8
operand. Elsewhere movers dequantize into a bf16 gathered array the bf16 builders read, and the
result is bitwise the bf16 op's on the dequantized operands. Any operand may also be a DeviceMX
whose blocks run along its contracting axis: local ones are dequantized on the stream first. The
reduce-scatters move bf16 in both precisions, so they take DeviceMX local operands the same way
(notes/mxfp8.md).

Streams and SMs: every op of a World runs after the previous op of any World on its GPU, whatever
stream each is issued on (kosmos.runtime.streams.device_order), so two kosmos grids never overlap.
`sm_cap` limits an op's grid to that many SMs; work of other libraries that waits across ranks
(NCCL) issued beside a kosmos op on another stream needs SMs of its own: keep `sm_cap` plus what
the other work occupies at or below the SM count, or issue it on the same stream.
Each op is one persistent kernel launch (hipsrc/tp.hip); `policy`, `ag_order`, `rs_order` and
`mover_threads` are the ablation switches of the paper's Tables 1, 2, A.2-A.4.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .. import gemm, mx
from ..arrays import refuse_overlap
from ..dtypes import bfloat16, copy_into, float32
from ..errors import KosmosError
from ..exchange import agree, collectively, comparable
from ..plan import SymmetricPlan
from ..runtime import PersistentLaunch, load_module, sm_count
from ..runtime.call_cache import remember
from ..runtime.streams import uses_stream
from ..timing import device_name
from ..world import World
from .heuristics import Crew, crew_for, hardware
from .params import AG_NT_PARAMS_DTYPE, AG_PARAMS_DTYPE, RS_PARAMS_DTYPE, TP_COMMON_DTYPE, record
from .queues import (AG_ORDERS, RS_ORDERS, TILE_ROW, BandGrid, GatherGrid, ag_mover_order, ag_tile_order,
                     rs_reducer_order, rs_tile_order, tile_indices)

POLICIES = {"one_way": 0, "fixed": 1, "two_way": 2}  # two_way: the AG kernels only
PRECISIONS = ("bf16", "mxfp8")  # of the gathered operand


def _ptr(arr: Any) -> np.uint64:
    """A device pointer kernel argument that does not keep the array alive."""
    return np.uint64(arr.data.ptr)


def _arrays(x: Any, name: str = "x") -> dict[str, Any]:
    """An operand's device arrays by name: a bf16 array, or an MXFP8 one's codes and scales."""
    if isinstance(x, mx.DeviceMX):
        return {f"{name}_codes": x.data, f"{name}_scales": x.scales}
    return {name: x}


def _copy_mx(dst: Any, src: Any, stream: Any) -> None:
    """dst's codes and scales = src's (two DeviceMX of one shape), on the stream."""
    copy_into(dst.data, src.data, stream)
    copy_into(dst.scales, src.scales, stream)


def _slice_cols(cols: int) -> int:
    return next(s for s in (1024, 512, 256, 128, 64) if cols % s == 0)


class _FusedOp(SymmetricPlan):
    kind = ""

    def __init__(self, world: World, m: int, n: int, k: int, *, sm_cap: int | None, policy: str,
                 movers: int | None, heap_bytes: Callable[[], int], switches: dict[str, Any]):
        """`switches`: every other argument of the op's constructor. All of them are agreed across ranks
        and validated (on every rank alike) before anything is allocated; `heap_bytes` is computed
        only then (from validated arguments)."""
        world.require_gpu()
        agree(world.comm, f"{type(self).__name__} shape and switches",
              comparable((m, n, k, sm_cap, policy, movers, sorted(switches.items()))))
        # Checked collectively: the agreement compares values, and True == 1 == 1.0 pass it alike, so
        # one rank may refuse what its peers accept; then every rank must raise, not wait in the heap.
        collectively(world.comm, f"checking {type(self).__name__}'s arguments",
                     lambda: self._check_args(m, n, k, sm_cap, policy, movers, switches))
        self.world, self.m, self.n, self.k = world, m, n, k
        self.P = world.size
        self.policy = policy
        hw = hardware(device_name(), sm_count())
        self.crew: Crew = crew_for(self.kind, self.P, m, n, k, hw, sm_cap)
        if movers is not None:  # an explicit split (the fixed-split ablation)
            if not 0 <= movers < self.crew.grid:
                raise ValueError(f"movers = {movers} must leave at least one builder in a grid of {self.crew.grid}")
            self.crew = Crew(movers, max(1, movers // max(1, self.P - 1)), self.crew.grid - movers, self.crew.grid)
        if self.P == 1:  # nothing to move: every CTA builds
            self.crew = Crew(0, 0, self.crew.grid, self.crew.grid)
        elif self.crew.movers == 0 and policy == "fixed":
            raise ValueError("a fixed split needs at least one mover: nobody would move the data")
        elif self.crew.movers == 0 and policy == "one_way" and self.kind in ("ag_tn", "ag_nn", "bulk_ag_nn"):
            raise ValueError("movers = 0 with policy 'one_way': in the all-gather kernels only movers gather, so "
                             "peers' rows would never arrive; pass movers >= 1, or policy 'two_way' (builders gather)")
        self.hw = hw
        SymmetricPlan.__init__(self, world, heap_bytes())
        self._args: dict[tuple[int, ...], list] = {}

    def _check_args(self, m: int, n: int, k: int, sm_cap: int | None, policy: str, movers: int | None,
                    switches: dict[str, Any]) -> None:
        """The constructor's checks, before the heap exists (run on every rank: see __init__)."""
        self._validate(switches, policy)
        if m < 128 or m % 128:
            raise ValueError(f"rows per rank m = {m} must be a positive multiple of 128 (the GEMM tile)")
        for name, v in (("n", n), ("k", k)):
            if v < 64 or v % 64:
                raise ValueError(f"{name} = {v} must be a positive multiple of 64")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {tuple(POLICIES)}, got {policy!r}")
        if policy == "two_way" and self.kind in ("tn_rs", "bulk_rs_nt"):
            raise ValueError("policy 'two_way' applies to the all-gather kernels; reduce-scatters are one_way or fixed")
        # Integers only (bools too are refused): crew_for would read sm_cap = 0 as the whole GPU, and
        # kernel fields are integers.
        for name, v, least in (("sm_cap", sm_cap, 1), ("movers", movers, 0)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < least):
                raise ValueError(f"{name} must be an integer >= {least} (or None), got {v!r}")

    def _validate(self, switches: dict[str, Any], policy: str) -> None:
        """Check the op's own switches and its policy (before the heap exists); every rank raises alike."""

    # ---- plumbing shared by the five ops ----
    stream_k: gemm.StreamKSplit | None = None  # whole tiles unless _set_gemm (AG+NN(+NT): its wgrad) cuts K
    keeps_mx = False  # the GEMM's A is MXFP8 in the builders (the *_mx kernels: AG+TN, AG+NN)

    def _set_gemm(self, shape: gemm.GemmShape, stream_k_allowed: bool = False) -> None:
        """The op's GEMM and the builder's tile width for it on this grid: gemm.choose_tile_n, as
        the plain GEMM chooses (the 192- and 128-wide tiles are Hopper ones). Every width reduces in
        the same order, so the choice never changes a bit of the result. stream_k_allowed: stream-K
        on 128 x 256 tiles where gemm.choose_stream_k takes it (Hopper; a tile then has several
        completion points, so only where no mover waits for tiles): self.stream_k is then the split
        (else None), bitwise kosmos.matmul with stream_k=True and sm_cap = the builders."""
        self.shape = shape
        wgmma = gemm.arch_path() == "wgmma"
        widths = gemm.TILE_WIDTHS if wgmma else (256,)  # tp.hip instantiates them all
        self.builders = max(1, self.crew.builders if self.P > 1 else self.crew.grid)  # movers build only late
        self.tile_n, self.stream_k = gemm.choose_tiling(shape, self.builders, widths, stream_k_allowed and wgmma)

    def _launch(self, name: str, mx_a: bool | None = None) -> PersistentLaunch:
        """The op's kernel (mx_a: its MXFP8-A builders' form, default keeps_mx). The last step of
        every op's constructor: it also waits for what the constructor uploaded on its stream (the
        order tables), which a first call on another stream would otherwise read half written (as
        the MoE plans wait)."""
        import cupy

        # the gemm module's options (a forced portable layer): shared_mem_bytes() follows them
        mod = load_module("tp.hip", world=self.world, extra_options=gemm._extra_options)
        mx_a = self.keeps_mx if mx_a is None else mx_a
        name += (("_mx" if mx_a else "") + ("" if self.tile_n == 256 else f"_n{self.tile_n}")
                 + ("_sk" if self.stream_k is not None else ""))
        launch = PersistentLaunch.checked(mod.get_function(name), self.crew.grid, gemm.block_threads(),
                                          gemm.shared_mem_bytes())
        cupy.cuda.runtime.deviceSynchronize()  # the tables, before a first call on any stream
        return launch

    _tmap = staticmethod(gemm.tmap_of)

    def _stream_k_record(self) -> np.void:
        """The kernel's StreamK record: the split in the device's shared stream-K workspace (as the
        plain GEMM's: the op's launches are in the same device order), or zeros (whole tiles)."""
        if self.stream_k is None:
            return np.zeros((), gemm.STREAM_K_DTYPE)[()]
        return gemm.stream_k_record(self.stream_k, self.world.device_id, sm_count())

    def _run(self, operands: tuple, build: Callable[[], list], stream: Any, launch: Any = None) -> None:
        """Launch one call; `build` makes its arguments (_kernel_args). Every field but the epoch
        depends only on the plan and on the operands' addresses, so the arguments are built once
        per address set and reused (pointers, not arrays: the cache keeps no operand alive). The
        epoch is taken last, so a call that fails before its launch leaves the ranks' epochs in step."""
        self._check_open()
        key = tuple(a.data.ptr for a in operands)
        args = self._args.get(key)
        if args is None:
            args = build()
            remember(self._args, key, args, size=16)
        self._set_epoch(args, self._next_call(stream)[0])
        (launch or self.launch)(args, stream=stream)

    @staticmethod
    def _set_epoch(args: list, epoch: np.uint64) -> None:
        args[3]["c"]["epoch"] = epoch

    def _problem(self, shape: gemm.GemmShape, a: Any, b: Any) -> np.void:
        return gemm.problem_record(a, b, shape.mo, shape.no, shape.kr, gemm.tile_counts(shape, self.tile_n))

    _epi = staticmethod(gemm.epi_record)

    def _tile_table(self, shape: gemm.GemmShape, tiles: np.ndarray | None) -> tuple[Any, int]:
        """(device order table or None, tile count). No order = the builder's own raster."""
        import cupy

        tm, tn, _ = gemm.tile_counts(shape, self.tile_n)
        if self.stream_k is not None:  # the builder's stream-K queue: whole tiles, then the K-ranges
            return None, self.stream_k.units
        if tiles is None:
            return None, tm * tn
        idx = tile_indices(tiles, self.m // gemm.tile_shape()[0], tm, tn, gemm.device_constants()["kGroupM"])
        if sorted(idx.tolist()) != list(range(tm * tn)):  # a queue order that skips or repeats a tile
            raise KosmosError(f"{type(self).__name__}: the tile order is not a permutation of the {tm * tn} tiles")
        return cupy.asarray(idx), tm * tn

    def _out_tmap(self, out: Any) -> np.void:
        """TMA map of a bf16 output (the builders' store path); fp32 outputs take no map."""
        return self._tmap(out) if out.dtype == bfloat16 else gemm.ZERO_TMAP

    def _kernel_args(self, a: Any, b: Any, out: Any, params: np.dtype, /, **fields: Any) -> list:
        """[A's, B's and out's TMA maps, the params record] of C = op(A, B) into `out`, with the
        TpCommon part filled in here and the family's `fields` by the op; the epoch is set by _run.
        (Positional-only: a family's fields include names like `out` and `x`.)"""
        w = self.world
        if isinstance(a, mx.DeviceMX):  # the MXFP8-A builders: A's codes (their own map) and scales
            problem = self._problem(self.shape, a.data, b)
            problem["a_scales"] = a.scales.data.ptr
            ta = gemm.tmap_of_codes(a.data)
        else:
            problem, ta = self._problem(self.shape, a, b), self._tmap(a)
        common = record(TP_COMMON_DTYPE, p=problem, wait=self._wait_ctx(),
                        peer_bases=_ptr(self.heap.peer_bases), mine=_ptr(self.flags.local),
                        tile_order=_ptr(self.tiles[0]) if self.tiles[0] is not None else 0,
                        flags_off=self.flags.offset, rank=w.rank, world=w.size, movers=self.crew.movers,
                        policy=POLICIES[self.policy], n_tiles=self.tiles[1])
        return [ta, self._tmap(b), self._out_tmap(out), record(params, c=common, **fields)]

    def _check(self, x: Any, name: str, shape: tuple[int, ...], dtype: Any = bfloat16, stream: Any = None, *,
               writable: bool = False) -> Any:
        return super()._check(x, name, shape, dtype, stream, writable=writable)

    def _local_operand(self, t: Any, name: str, shape: tuple[int, ...], layout: str, operand: int,
                       stream: Any) -> Any:
        """A local GEMM operand, checked: bf16, or a DeviceMX with its blocks along its contracting
        axis in `layout` (operand 0: a, 1: b), dequantized on the stream first."""
        return self._check(gemm.dequantized_operand(t, name, layout, operand, stream), name, shape, stream=stream)

    def _mx_a_path(self, layout: str) -> bool:
        """Whether kosmos.matmul would keep the op's GEMM's MXFP8 A in the builders (gemm.mx_a_path,
        whole tiles): then the op runs its *_mx kernel, bitwise that GEMM."""
        return gemm.mx_a_path(layout, "store", 1, False, gemm.arch_path() == "wgmma", self.shape.no,
                              gemm.mx_a_max_columns())

    def _kperm_operand(self, t: Any, name: str, shape: tuple[int, ...], layout: str, stream: Any) -> Any:
        """The B operand of an MXFP8-A GEMM: t (bf16, or a DeviceMX with blocks along its
        contracting axis in `layout`) checked, then permuted per 64-slab (kosmos.mx.kperm_operand)."""
        t = (mx.check_mx(t, name, shape, stream=stream) if isinstance(t, mx.DeviceMX)
             else self._check(t, name, shape, stream=stream))
        return mx.kperm_operand(t, axis=gemm.contracting_axis(layout, 1), stream=stream)

    def describe(self) -> str:
        c = self.crew
        return (f"{type(self).__name__}(P={self.P}, m={self.m}, n={self.n}, k={self.k}): grid {c.grid}, "
                f"{c.movers} movers ({c.movers_per_peer}/peer), policy {self.policy}, 128x{self.tile_n} tiles"
                + (", MXFP8 A in the builders" if self.keeps_mx else "")
                + (f", stream-K ({self.stream_k.tail} tiles x {self.stream_k.ranges} K-ranges)" if self.stream_k else ""))


class _AllGatherBase(_FusedOp):
    """Shared by AG+TN, AG+NN and bulk AG || NN: the staged shard, the arrival counters, the movers' table.

    Each rank stages its shard in its heap (peers pull it from there); the movers gather every
    shard into a plain [P*m, row] array, which is the GEMM's A operand and, when the caller
    passes one, the gathered result. Alone (P = 1) the builders read x itself.
    """

    kernel_enum = "KERNEL_AG_GEMM"

    @staticmethod
    def _heap_bytes(world: World, m: int, row: int) -> int:
        return m * row * 2 + world.size * (m // TILE_ROW + 1) * 8 + 4096

    def _validate(self, switches: dict[str, Any], policy: str) -> None:
        if switches.get("precision", "bf16") not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {switches['precision']!r}")
        if switches.get("layout", "TN") not in ("TN", "NN"):
            raise ValueError(f"AllGatherMatmul layout is 'TN' (fprop) or 'NN' (dgrad), got {switches['layout']!r}")
        threads = gemm.block_threads()
        mt = switches.get("mover_threads")
        if mt is not None and (not isinstance(mt, (int, np.integer)) or not 32 <= mt <= threads or mt % 32):
            raise ValueError(f"mover_threads must be a multiple of 32 in [32, {threads}], got {mt!r}")
        if switches.get("ag_order", "local_first") not in AG_ORDERS:
            raise ValueError(f"ag_order must be one of {AG_ORDERS}, got {switches['ag_order']!r}")
        kx = switches.get("kx")
        if kx is not None and (not isinstance(kx, (int, np.integer)) or kx < 64 or kx % 64):
            raise ValueError(f"kx = {kx!r} must be a positive multiple of 64")

    def _setup_gather(self, row_elems: int, ag_order: str, mover_threads: int | None, precision: str,
                      mx_axis: int) -> None:
        """mx_axis: the axis an MXFP8 gathered operand has its blocks along (1: rows, 0: columns)."""
        import cupy

        P, m = self.P, self.m
        self.row_elems = row_elems
        self.grid_g = GatherGrid(P, self.world.rank, m, gemm.tile_shape()[0], 1)
        self.precision, self.mx_axis = precision, mx_axis
        if precision == "mxfp8":  # codes and scales (row_elems >= 64: both fit the bf16 shard's bytes)
            self.shard = self.heap.alloc((m, row_elems), np.uint8)
            self.shard_scales = self.heap.alloc(mx.scales_shape(m, row_elems, mx_axis), np.uint8)
        else:
            self.shard = self.heap.alloc((m, row_elems), bfloat16)
        self.arrived = self.heap.alloc((P * self.grid_g.items_per_chunk,), np.uint64)
        self.mover_order = cupy.asarray(ag_mover_order(self.grid_g))
        self.ag_order = ag_order
        self.mover_threads = gemm.block_threads() if mover_threads is None else int(mover_threads)
        # the gathered arrays when the caller keeps none, per gather (made on first use)
        self._scratch: dict[int, Any] = {}

    @property
    def gathered_shape(self) -> tuple[int, int]:
        return (self.P * self.m, self.row_elems)

    @property
    def gathers_mx(self) -> bool:
        """Whether the gathered array may stay MXFP8 (a DeviceMX keep): where the builders read it
        in MXFP8 (keeps_mx; BulkAllGatherMatmul: always in mxfp8)."""
        return self.keeps_mx

    def _keep(self, keep: Any, name: str, stream: Any, **inputs: Any) -> Any:
        """The caller's array for the gathered operand, checked (and disjoint from the inputs), or
        None: bf16, or (an op that gathers_mx) a DeviceMX with blocks along mx_axis."""
        if keep is None:
            return None
        if isinstance(keep, mx.DeviceMX) and self.gathers_mx:
            keep = mx.check_mx(keep, name, self.gathered_shape, axis=self.mx_axis, stream=stream, writable=True)
            for what, a in _arrays(keep, name).items():
                refuse_overlap(what, a, **inputs)
            return keep
        if isinstance(keep, mx.DeviceMX):
            raise TypeError(f"{name}: this op gathers into bf16 (keeps_mx is False: "
                            f"{self.shape.no} output columns, or not Hopper); pass a bf16 array")
        keep = self._check(keep, name, self.gathered_shape, stream=stream, writable=True)
        refuse_overlap(name, keep, **inputs)
        return keep

    def _gather_input(self, x: Any, name: str, stream: Any) -> Any:
        """The operand to gather, checked: a bf16 [m, row] array, or (mxfp8) a DeviceMX of that shape
        with its blocks along mx_axis."""
        if self.precision == "mxfp8":
            return mx.check_mx(x, name, (self.m, self.row_elems), axis=self.mx_axis, stream=stream)
        return self._check(x, name, (self.m, self.row_elems), stream=stream)

    def _gathered(self, x: Any, keep: Any, stream: Any, gather: int = 0) -> Any:
        """The array the movers fill: the caller's (checked) `keep`, else the plan's scratch for
        that gather. Alone there is nothing to gather: x itself (where `keep` gets a copy), or x
        dequantized (mxfp8)."""
        import cupy

        if self.P == 1 and self.precision == "bf16":
            if keep is not None:
                copy_into(keep, x, stream)
            return x
        if self.keeps_mx and gather == 0:
            return self._gathered_mx(x, keep, stream)
        if keep is not None:
            target = keep
        else:
            if gather not in self._scratch:
                self._scratch[gather] = cupy.empty(self.gathered_shape, bfloat16)
            target = self._scratch[gather]
        if self.P == 1:
            # Join the device order first: the scratch may still be the previous call's GEMM operand,
            # on another stream. (The kernel then goes on this stream after it.)
            self._join(stream)
            mx.dequantize_device(x, out=target, stream=stream)
        return target

    def _gathered_mx(self, x: Any, keep: Any, stream: Any) -> Any:
        """_gathered of an op that keeps_mx: the DeviceMX the movers fill (the caller's, or the plan's
        scratch); alone x itself, copied into a DeviceMX `keep`. A bf16 `keep` receives the gathered
        operand dequantized after the launch (_kept_bf16)."""
        if self.P == 1:
            if isinstance(keep, mx.DeviceMX):
                _copy_mx(keep, x, stream)
            return x
        if isinstance(keep, mx.DeviceMX):
            return keep
        if 0 not in self._scratch:
            self._scratch[0] = mx.empty_mx(*self.gathered_shape, 1)
        return self._scratch[0]

    def _kept_bf16(self, gathered: Any, keep: Any, stream: Any) -> None:
        """After the launch: a bf16 `keep` of an op that keeps_mx gets the gathered operand dequantized."""
        if self.keeps_mx and keep is not None and not isinstance(keep, mx.DeviceMX):
            mx.dequantize_device(gathered, out=keep, stream=stream)

    def _gather_args(self, a: Any, b: Any, out: Any, x: Any, gathered: Any) -> list:
        g = self.grid_g
        is_mx = isinstance(x, mx.DeviceMX)
        kept = isinstance(gathered, mx.DeviceMX)  # the movers copy codes and scales (keeps_mx)
        return self._kernel_args(
            a, b, out, AG_PARAMS_DTYPE, epi=self._epi(out, *out.shape), shard_off=self.shard.offset,
            gathered=_ptr(gathered.data if kept else gathered), gathered_scales=_ptr(gathered.scales) if kept else 0,
            arrived=_ptr(self.arrived.local), x=_ptr(x.data if is_mx else x), m=self.m,
            row_bytes=self.row_elems * 2, mover_order=_ptr(self.mover_order), items_per_chunk=g.items_per_chunk,
            tiles_m_per_chunk=g.tiles_m_per_chunk, n_mover_items=len(self.mover_order),
            mover_threads=self.mover_threads, scales_off=self.shard_scales.offset if is_mx else 0,
            x_scales=_ptr(x.scales) if is_mx else 0, mx_blocks=mx.blocks_code(x) if is_mx else 0)


class AllGatherMatmul(_AllGatherBase):
    """AG+TN (layout="TN"): Y[P*m, n] = allgather(X[m, k]) @ W[n, k]^T  (column-parallel fprop).
    AG+NN (layout="NN"): dX[P*m, k] = allgather(dY[m, n]) @ W[n, k]    (row-parallel dgrad).
    """

    def __init__(self, world: World, m: int, n: int, k: int, *, layout: str = "TN", sm_cap: int | None = None,
                 policy: str = "one_way", movers: int | None = None, ag_order: str = "local_first",
                 mover_threads: int | None = None, precision: str = "bf16"):
        self.kind = "ag_tn" if layout == "TN" else "ag_nn"
        self.layout = layout
        row = k if layout == "TN" else n  # gathered operand: X[m, k] or dY[m, n]
        super().__init__(world, m, n, k, sm_cap=sm_cap, policy=policy, movers=movers,
                         heap_bytes=lambda: self._heap_bytes(world, m, row),
                         switches=dict(layout=layout, ag_order=ag_order, mover_threads=mover_threads,
                                       precision=precision))
        self._setup_gather(row, ag_order, mover_threads, precision, mx_axis=1)  # blocks along the reduction
        P = self.P
        a_shape = (P * m, row)
        b_shape = (n, k)
        self._set_gemm(gemm.gemm_shape(layout, a_shape, b_shape))
        # As kosmos.matmul routes the plain MXFP8 GEMM (a rank's own choice: the staged shards are
        # MXFP8 either way, only what its movers write differs). Not two-way: the MXFP8-A kernels'
        # builders never go back to gathering (hipsrc/tp.hip ag_gemm: their registers).
        self.keeps_mx = precision == "mxfp8" and policy != "two_way" and self._mx_a_path(layout)
        tm, tn, _ = gemm.tile_counts(self.shape, self.tile_n)
        g = GatherGrid(P, world.rank, m, gemm.tile_shape()[0], tn)
        # Alone every order is the builder's raster: no table (one dependent load less per claim).
        self.tiles = self._tile_table(self.shape, ag_tile_order(g, ag_order) if P > 1 else None)
        self.launch = self._launch("kosmos_tp_ag_tn" if layout == "TN" else "kosmos_tp_ag_nn")

    @property
    def out_shape(self) -> tuple[int, int]:
        return self.shape.out_shape

    @uses_stream
    def __call__(self, x: Any, w: Any, out: Any = None, *, gathered: Any = None, stream: Any = None) -> Any:
        """Returns out. gathered: an optional [P*m, row] array that receives (and keeps) the gathered
        operand: bf16 (dequantized, mxfp8), or, where the op keeps_mx, also a DeviceMX (its codes and
        scales, blocks along rows); without it the plan's scratch array is used and overwritten next
        call. w: bf16, or a DeviceMX with blocks along its contracting axis."""
        x = self._gather_input(x, "x" if self.layout == "TN" else "dy", stream)
        if self.keeps_mx:
            w = self._kperm_operand(w, "w", (self.n, self.k), self.layout, stream)
        else:
            w = self._local_operand(w, "w", (self.n, self.k), self.layout, 1, stream)
        xs = _arrays(x)
        out = self._output(out, self.out_shape, bfloat16, stream)
        gathered = self._keep(gathered, "gathered", stream, **xs, w=w)
        refuse_overlap("out", out, **xs, w=w, **_arrays(gathered, "gathered"))
        a = self._gathered(x, gathered, stream)
        self._run((*xs.values(), w, out, *_arrays(a).values()), lambda: self._gather_args(a, w, out, x, a), stream)
        self._kept_bf16(a, gathered, stream)
        return out


class AllGatherMatmulNNNT(_AllGatherBase):
    """AG+NN(+NT), the MXFP8 row-parallel backward in one launch (the paper's MXFP8-only kernel):

        dX[P*m, k] = allgather(dY[m, n]) @ W[n, k]      over dY's row-wise copy (blocks along n)
        dW[n, k]   = allgather(dY)^T @ X[P*m, k]        over its column-wise copy (blocks along tokens)

    Both MXFP8 copies of dY (kosmos.mx.quantize_both) are gathered, 33/64 of the bf16 bytes each;
    the builders run the dgrad tiles as their rows arrive, then the wgrad tiles once the column-wise
    copy is complete. The row-wise copy stays MXFP8 for the dgrad's MXFP8-A builders where
    kosmos.matmul would keep it (`keeps_mx`, as AllGatherMatmul; W k-permuted on the stream), else
    movers dequantize it; movers dequantize the column-wise copy for the bf16 wgrad. W and X: bf16,
    or DeviceMX with blocks along their contracting axes (W along n, X along the tokens), X
    dequantized on the stream first. dX is bitwise kosmos.matmul(gathered row-wise dY, W, "NN") and
    dW the NT GEMM on the dequantized column-wise copy: kosmos.matmul with tile_n (whole tiles), or,
    where `stream_k` holds the wgrad's split, with stream_k=True and sm_cap = the builders.
    """

    kind = "ag_nn"  # the crew rules of the AG+NN it extends

    def __init__(self, world: World, m: int, n: int, k: int, *, sm_cap: int | None = None, policy: str = "one_way",
                 movers: int | None = None, mover_threads: int | None = None):
        import cupy

        super().__init__(world, m, n, k, sm_cap=sm_cap, policy=policy, movers=movers,
                         heap_bytes=lambda: 2 * self._heap_bytes(world, m, n),
                         switches=dict(mover_threads=mover_threads, precision="mxfp8"))
        P = self.P
        self._setup_gather(n, "local_first", mover_threads, "mxfp8", mx_axis=1)  # the dgrad's copy
        self.shard2 = self.heap.alloc((m, n), np.uint8)                           # the wgrad's copy
        self.shard2_scales = self.heap.alloc(mx.scales_shape(m, n, 0), np.uint8)
        self.arrived2 = self.heap.alloc((P * self.grid_g.items_per_chunk,), np.uint64)
        pairs = ag_mover_order(self.grid_g)  # the row-wise copy's items first: the dgrad needs them first
        self.mover_order = cupy.asarray(np.concatenate(
            [np.c_[pairs, np.full(len(pairs), j, np.int32)] for j in (0, 1)]).astype(np.int32))
        self._set_gemm(gemm.gemm_shape("NN", (P * m, n), (n, k)))
        self.keeps_mx = self._mx_a_path("NN")
        tm, tn, _ = gemm.tile_counts(self.shape, self.tile_n)
        g = GatherGrid(P, world.rank, m, gemm.tile_shape()[0], tn)
        self.tiles = self._tile_table(self.shape, ag_tile_order(g, "local_first") if P > 1 else None)
        self.wgrad_shape = gemm.gemm_shape("NT", (P * m, n), (P * m, k))
        # The wgrad in stream-K where kosmos.matmul would cut it on the builders: its few tiles
        # reduce over every gathered row (8B-OProj: 64 tiles of 128+ slabs on 132 CTAs, whole ones
        # after the dgrad cost 1.24x the plain GEMMs). 128 x 256 only: one ring for both GEMMs.
        if self.tile_n == 256 and gemm.arch_path() == "wgmma":
            self.stream_k = gemm.choose_tiling(self.wgrad_shape, self.builders, (256,), True)[1]
        wm, wn, _ = gemm.tile_counts(self.wgrad_shape, self.tile_n)
        self.n_tiles2 = self.stream_k.units if self.stream_k is not None else wm * wn
        self.launch = self._launch("kosmos_tp_ag_nn_nt")

    def _validate(self, switches: dict[str, Any], policy: str) -> None:
        super()._validate(switches, policy)
        if policy == "two_way":  # here, after the agreement: every rank raises alike
            raise ValueError("AllGatherMatmulNNNT runs policy 'one_way' or 'fixed' (two_way is not built for it)")

    @staticmethod
    def _set_epoch(args: list, epoch: np.uint64) -> None:
        args[6]["a"]["c"]["epoch"] = epoch

    @uses_stream
    def __call__(self, dy_rows: Any, dy_cols: Any, w: Any, x: Any, dx: Any = None, dw: Any = None, *,
                 gathered: Any = None, stream: Any = None) -> tuple[Any, Any]:
        """Returns (dX, dW), both bf16. gathered: an optional [P*m, n] array that receives the
        row-wise copy of the gathered dY: bf16 (dequantized), or, where the op keeps_mx, a DeviceMX."""
        P, m, n, k = self.P, self.m, self.n, self.k
        dy_rows = self._gather_input(dy_rows, "dy_rows", stream)
        dy_cols = mx.check_mx(dy_cols, "dy_cols", (m, n), axis=0, stream=stream)
        if self.keeps_mx:
            w = self._kperm_operand(w, "w", (n, k), "NN", stream)
        else:
            w = self._local_operand(w, "w", (n, k), "NN", 1, stream)
        x = self._local_operand(x, "x", (P * m, k), "NT", 1, stream)
        dx = self._output(dx, (P * m, k), bfloat16, stream, name="dx")
        dw = self._output(dw, (n, k), bfloat16, stream, name="dw")
        ins = dict(dy_rows=dy_rows.data, dy_rows_scales=dy_rows.scales, dy_cols=dy_cols.data,
                   dy_cols_scales=dy_cols.scales, w=w, x=x)
        gathered = self._keep(gathered, "gathered", stream, **ins)
        kept = _arrays(gathered, "gathered")
        refuse_overlap("dx", dx, **ins, **kept)
        refuse_overlap("dw", dw, **ins, **kept, dx=dx)
        g1 = self._gathered(dy_rows, gathered, stream)
        g2 = self._gathered(dy_cols, None, stream, gather=1)  # alone: the column-wise copy dequantized
        self._run((*ins.values(), dx, dw, *_arrays(g1).values()),
                  lambda: self._nn_nt_args(dy_rows, dy_cols, w, x, dx, dw, g1, g2), stream)
        self._kept_bf16(g1, gathered, stream)
        return dx, dw

    def _nn_nt_args(self, dy_rows: Any, dy_cols: Any, w: Any, x: Any, dx: Any, dw: Any, g1: Any, g2: Any) -> list:
        """[dgrad maps (g1, w, dx), wgrad maps (g2, x, dw), AgNtParams] (hipsrc/tp.hip ag_nn_nt)."""
        ag = self._gather_args(g1, w, dx, dy_rows, g1)
        ws = self.wgrad_shape
        rec = record(AG_NT_PARAMS_DTYPE, a=ag[3],
                     p2=gemm.problem_record(g2, x, ws.mo, ws.no, ws.kr, gemm.tile_counts(ws, self.tile_n)),
                     epi2=self._epi(dw, *dw.shape), shard_off2=self.shard2.offset,
                     scales_off2=self.shard2_scales.offset, gathered2=_ptr(g2), arrived2=_ptr(self.arrived2.local),
                     x2=_ptr(dy_cols.data), x_scales2=_ptr(dy_cols.scales), mx_blocks2=mx.blocks_code(dy_cols),
                     n_tiles2=self.n_tiles2, sk2=self._stream_k_record())
        return [*ag[:3], self._tmap(g2), self._tmap(x), self._out_tmap(dw), rec]


class BulkAllGatherMatmul(_AllGatherBase):
    """Column-parallel dgrad: X_full[P*m, kx] = allgather(X[m, kx]) beside dX[P*m, k] = dY[P*m, n] @ W[n, k].

    The gather (kept for the wgrad) and the dgrad are independent; movers become builders when
    their share of the gather is done. kx defaults to k (the layer's input width).
    MXFP8: X_full is what was gathered, a DeviceMX with blocks along its columns (movers copy codes
    and scales; the wgrad's op dequantizes it), unless the caller passes a bf16 x_full (movers
    dequantize into it). An MXFP8 dY stays MXFP8 in the builders where kosmos.matmul would keep it
    (gemm.mx_a_path; the *_mx kernel, W k-permuted on the stream), bitwise kosmos.matmul(dy, w, "NN").
    """

    kind = "bulk_ag_nn"

    @property
    def gathers_mx(self) -> bool:
        return self.precision == "mxfp8"  # X_full is the wgrad's, not the builders': kept MXFP8 whenever gathered so

    def __init__(self, world: World, m: int, n: int, k: int, *, kx: int | None = None, sm_cap: int | None = None,
                 policy: str = "one_way", movers: int | None = None, mover_threads: int | None = None,
                 precision: str = "bf16"):
        switches = dict(kx=kx, mover_threads=mover_threads, precision=precision)
        kx = k if kx is None else kx
        super().__init__(world, m, n, k, sm_cap=sm_cap, policy=policy, movers=movers,
                         heap_bytes=lambda: self._heap_bytes(world, m, kx), switches=switches)
        # X_full feeds the wgrad dW = dY^T X_full, which reduces over rows: MX blocks along columns
        self._setup_gather(kx, "local_first", mover_threads, precision, mx_axis=0)
        P = self.P
        self._set_gemm(gemm.gemm_shape("NN", (P * m, n), (n, k)))
        self.tiles = self._tile_table(self.shape, None)
        # An MXFP8 dY's builders (as kosmos.matmul routes it); the kernel is built on first use
        self.dy_stays_mx = precision == "mxfp8" and self._mx_a_path("NN")
        self._launch_mx: PersistentLaunch | None = None
        self.launch = self._launch("kosmos_tp_bulk_ag_nn")

    @uses_stream
    def __call__(self, x: Any, dy: Any, w: Any, dx: Any = None, x_full: Any = None,
                 stream: Any = None) -> tuple[Any, Any]:
        """Returns (X_full, dX). The movers write X_full (a new array unless given: bf16, or for
        mxfp8 a DeviceMX [P*m, kx] with blocks along columns; a bf16 x_full given receives it
        dequantized); alone the gather is the identity and, unless x_full is given, X_full is x
        itself (no copy). dy and w: bf16, or DeviceMX with blocks along their contracting axes."""
        import cupy

        P, m, n, k = self.P, self.m, self.n, self.k
        x = self._gather_input(x, "x", stream)
        launch = None
        if self.dy_stays_mx and isinstance(dy, mx.DeviceMX):  # the MXFP8-A builders (B k-permuted)
            dy = mx.check_mx(dy, "dy", (P * m, n), axis=1, stream=stream)
            w = self._kperm_operand(w, "w", (n, k), "NN", stream)
            if self._launch_mx is None:
                self._launch_mx = self._launch("kosmos_tp_bulk_ag_nn", mx_a=True)
            launch = self._launch_mx
        else:
            dy = self._local_operand(dy, "dy", (P * m, n), "NN", 0, stream)
            w = self._local_operand(w, "w", (n, k), "NN", 1, stream)
        xs, dys = _arrays(x), _arrays(dy, "dy")
        ins = dict(**xs, **dys, w=w)
        dx = self._output(dx, self.shape.out_shape, bfloat16, stream, name="dx")
        if x_full is not None:
            x_full = self._keep(x_full, "x_full", stream, **ins)
        elif P == 1:
            x_full = x  # nothing to gather (bf16 or MXFP8)
        elif self.precision == "mxfp8":
            x_full = mx.empty_mx(*self.gathered_shape, 0)
        else:
            x_full = cupy.empty(self.gathered_shape, bfloat16)
        refuse_overlap("dx", dx, **ins, **({} if x_full is x else _arrays(x_full, "x_full")))
        if x_full is x:
            gathered = x
        elif isinstance(x_full, mx.DeviceMX):  # the movers copy codes and scales
            gathered = x_full
            if P == 1:
                _copy_mx(x_full, x, stream)
        else:
            gathered = self._gathered(x, x_full, stream)
        self._run((*xs.values(), *dys.values(), w, dx, *_arrays(gathered).values()),
                  lambda: self._gather_args(dy, w, dx, x, gathered), stream, launch)
        return x_full, dx


def _dtype_of(dt: Any, what: str) -> np.dtype:
    """bf16 or fp32 (the staging and wgrad types), else a TypeError naming `what`."""
    try:
        d = np.dtype(dt)
    except TypeError:
        d = None
    if d not in (bfloat16, float32):
        raise TypeError(f"{what} must be bfloat16 or float32, got {dt!r}")
    return d


class _ReduceScatterBase(_FusedOp):
    kernel_enum = "KERNEL_GEMM_RS"

    def _validate(self, switches: dict[str, Any], policy: str) -> None:
        for what in ("staging_dtype", "dw_dtype"):
            if what in switches:
                _dtype_of(switches[what], what)
        if switches.get("rs_order", "band_major") not in RS_ORDERS:
            raise ValueError(f"rs_order must be one of {RS_ORDERS}, got {switches['rs_order']!r}")

    @staticmethod
    def _staging_bytes(world: World, m: int, cols: int, itemsize: int) -> int:
        """The heap's two staging buffers of [P*m, cols]; none alone, where the kernel never stages
        (hipsrc/tp.hip gemm_rs: TN+RS writes out directly, the bulk RS copies x to out)."""
        return 2 * world.size * m * cols * itemsize if world.size > 1 else 0

    def _setup_reduce(self, cols: int, staging_dtype: np.dtype) -> None:
        import cupy


        from ..collectives import RS_SENTINEL

        P, m = self.P, self.m
        self.cols = cols
        self.staging_dtype = np.dtype(staging_dtype)
        self.band = BandGrid(P, self.world.rank, m, gemm.tile_shape()[0], 1, band_tile_rows=TILE_ROW // gemm.tile_shape()[0])
        self.slice_cols = _slice_cols(cols)
        if P == 1:  # no staging (_staging_bytes): the kernel gets offset and size 0 and never reads them
            self.buffer_bytes, self.staging, self.staging_buffers = 0, None, []
        else:
            self.buffer_bytes = P * m * cols * self.staging_dtype.itemsize
            self.staging = self.heap.alloc((2 * P * m * cols,), RS_SENTINEL[self.staging_dtype].dtype)
            self.staging.local.fill(RS_SENTINEL[self.staging_dtype])
            cupy.cuda.runtime.deviceSynchronize()
            self.world.comm.Barrier()  # every staging buffer is poisoned before any peer reads it
            # The two staging buffers (the kernel writes buffer epoch % 2) as [P*m, cols] arrays.
            flat = self.staging.local.view(self.staging_dtype)
            self.staging_buffers = [flat[i * P * m * cols:(i + 1) * P * m * cols].reshape(P * m, cols)
                                    for i in (0, 1)]
        self.reduce_order = cupy.asarray(rs_reducer_order(self.band, cols, cols // self.slice_cols))
        # Builders that join the reducers when the GEMM queue empties: up to link saturation.
        self.max_join = self.crew.grid if P == 1 else max(0, self.hw.link_saturating_movers - self.crew.movers)

    def _reduce_args(self, a: Any, b: Any, c: Any, x: Any, out: Any) -> list:
        """Arguments of C = op(A, B) (into c: the staging buffer, or dW) beside reducing x into out."""
        n_items = len(self.reduce_order) if self.P > 1 else 0  # alone there is nothing to reduce
        return self._kernel_args(
            a, b, c, RS_PARAMS_DTYPE, epi=self._epi(c, *c.shape),
            staging_off=self.staging.offset if self.staging is not None else 0,
            buffer_bytes=self.buffer_bytes, m=self.m, cols=self.cols, x=_ptr(x), out=_ptr(out),
            reduce_order=_ptr(self.reduce_order), band_rows=TILE_ROW, n_reduce_items=n_items,
            slice_log2=self.slice_cols.bit_length() - 1, max_join=self.max_join, sk=self._stream_k_record())


class MatmulReduceScatter(_ReduceScatterBase):
    """TN+RS (row-parallel fprop): Y[m, n] = reduce_scatter(X[P*m, k] @ W[n, k]^T), bf16 out.

    Partial tiles are staged in `staging_dtype` (bf16: half the link bytes; float32: partials
    rounded only once) and summed in fp32 in rank order: bitwise reproducible.
    """

    kind = "tn_rs"

    def __init__(self, world: World, m: int, n: int, k: int, *, staging_dtype: Any = bfloat16,
                 sm_cap: int | None = None, policy: str = "one_way", movers: int | None = None,
                 rs_order: str = "band_major"):
        super().__init__(world, m, n, k, sm_cap=sm_cap, policy=policy, movers=movers,
                         heap_bytes=lambda: self._staging_bytes(world, m, n, np.dtype(staging_dtype).itemsize),
                         switches=dict(staging_dtype=staging_dtype, rs_order=rs_order))
        sd = np.dtype(staging_dtype)
        self._setup_reduce(n, sd)
        P = self.P
        self._set_gemm(gemm.gemm_shape("TN", (P * m, k), (n, k)))
        tm, tn, _ = gemm.tile_counts(self.shape, self.tile_n)
        bg = BandGrid(P, world.rank, m, gemm.tile_shape()[0], tn, band_tile_rows=TILE_ROW // gemm.tile_shape()[0])
        # Alone nothing is reduced, so the builders keep the plain GEMM's raster (8-row groups, not 2-row bands).
        self.tiles = self._tile_table(self.shape, rs_tile_order(bg, rs_order) if P > 1 else None)
        # Alone, the builders write the bf16 output directly, whatever the staging type.
        self.launch = self._launch("kosmos_tp_tn_rs_" + ("bf16" if sd == bfloat16 or self.P == 1 else "f32"))

    @uses_stream
    def __call__(self, x: Any, w: Any, out: Any = None, stream: Any = None) -> Any:
        P, m, n = self.P, self.m, self.n
        x = self._local_operand(x, "x", (P * m, self.k), "TN", 0, stream)
        w = self._local_operand(w, "w", (n, self.k), "TN", 1, stream)
        out = self._output(out, (m, n), bfloat16, stream)
        refuse_overlap("out", out, x=x, w=w)
        # Partials go to the staging buffer of this call's epoch parity (alone: straight to out).
        cur = self.staging_buffers[(self.epoch + 1) & 1] if P > 1 else out
        self._run((x, w, out, cur), lambda: self._reduce_args(x, w, cur, x, out), stream)
        return out


class BulkReduceScatterMatmul(_ReduceScatterBase):
    """Column-parallel wgrad: dX[m, k] = reduce_scatter(dXp[P*m, k]) beside dW[n, k] = dY[P*m, n]^T @ X[P*m, k].

    dW is bf16 (or float32 with dw_dtype=float32). At P = 1 the reduce-scatter is the identity
    and, unless a dx array is given, the returned dX is dXp itself (no copy).
    """

    kind = "bulk_rs_nt"

    def __init__(self, world: World, m: int, n: int, k: int, *, dw_dtype: Any = bfloat16, sm_cap: int | None = None,
                 policy: str = "one_way", movers: int | None = None):
        super().__init__(world, m, n, k, sm_cap=sm_cap, policy=policy, movers=movers,
                         heap_bytes=lambda: self._staging_bytes(world, m, k, 2), switches=dict(dw_dtype=dw_dtype))
        self._setup_reduce(k, bfloat16)
        self.dw_dtype = np.dtype(dw_dtype)
        self._set_gemm(gemm.gemm_shape("NT", (self.P * m, n), (self.P * m, k)), stream_k_allowed=True)
        self.tiles = self._tile_table(self.shape, None)
        self.launch = self._launch("kosmos_tp_bulk_rs_nt_" + ("bf16" if self.dw_dtype == bfloat16 else "f32"))

    @uses_stream
    def __call__(self, dx_partial: Any, dy: Any, x_full: Any, dx: Any = None, dw: Any = None,
                 stream: Any = None) -> tuple[Any, Any]:
        P, m, n, k = self.P, self.m, self.n, self.k
        dx_partial = self._check(dx_partial, "dx_partial", (P * m, k), stream=stream)
        dy = self._local_operand(dy, "dy", (P * m, n), "NT", 0, stream)
        x_full = self._local_operand(x_full, "x_full", (P * m, k), "NT", 1, stream)
        # Alone the reduce-scatter is the identity: without a dx to fill, dx is dx_partial itself.
        dx = dx_partial if dx is None and P == 1 else self._output(dx, (m, k), bfloat16, stream, name="dx")
        dw = self._output(dw, (n, k), self.dw_dtype, stream, name="dw")
        if dx is not dx_partial:
            refuse_overlap("dx", dx, dx_partial=dx_partial, dy=dy, x_full=x_full, dw=dw)
        refuse_overlap("dw", dw, dx_partial=dx_partial, dy=dy, x_full=x_full)
        self._run((dx_partial, dy, x_full, dx, dw), lambda: self._reduce_args(dy, x_full, dw, dx_partial, dx),
                  stream)
        return dx, dw
