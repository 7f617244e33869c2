"""Host logic of the TP+SP fused ops: queue orders and crew heuristics (no GPU)."""
from __future__ import annotations

import itertools
import types

import numpy as np
import pytest

from kosmos.tp.heuristics import KINDS, Hardware, crew_for, hardware
from kosmos.tp.params import AG_PARAMS_DTYPE, record
from kosmos.tp.queues import (TILE_ROW, BandGrid, GatherGrid, ag_mover_order, ag_tile_order, peer_order,
                              rs_reducer_order, rs_tile_order)


@pytest.mark.parametrize("world,rank", [(1, 0), (2, 1), (3, 0), (4, 2), (8, 7)])
def test_peer_order_is_destination_minor(world, rank):
    peers = peer_order(world, rank)
    assert sorted(peers + [rank]) == list(range(world))
    assert peers[:1] == ([(rank + 1) % world] if world > 1 else [])


@pytest.mark.parametrize("world,rank,m", [(2, 0, 256), (4, 3, 384), (3, 1, 128), (8, 5, 1024)])
@pytest.mark.parametrize("order", ["local_first", "chunk_major", "naive"])
def test_ag_tile_order_is_a_permutation(world, rank, m, order):
    g = GatherGrid(world, rank, m, 128, 5)
    tiles = ag_tile_order(g, order)
    assert len(tiles) == world * g.tiles_m_per_chunk * 5
    assert len({tuple(t) for t in tiles}) == len(tiles)


def test_ag_local_first_follows_the_gather_order():
    """Local tiles first; then each peer tile comes no earlier than the item it waits for is gathered."""
    g = GatherGrid(4, 1, 640, 128, 2)
    tiles = ag_tile_order(g, "local_first")
    n_local = g.tiles_m_per_chunk * 2
    assert (tiles[:n_local, 0] == 1).all()
    movers = [tuple(x) for x in ag_mover_order(g)]
    steps = [movers.index((c, g.item_of_tile_row(tm))) // (g.world - 1) for c, tm, _ in tiles[n_local:]]
    assert steps == sorted(steps)  # builders consume gather steps in the order movers produce them


def test_tile_orders_share_b_columns_across_rows():
    """Column-major within a group of rows (L2 reuse of B), not one tile row at a time."""
    g = GatherGrid(1, 0, 1024, 128, 4)
    tiles = ag_tile_order(g)
    assert [tuple(t) for t in tiles[:3]] == [(0, 0, 0), (0, 1, 0), (0, 2, 0)]


def test_ag_naive_and_chunk_major_differ_from_shipped():
    g = GatherGrid(4, 2, 512, 128, 1)
    assert ag_tile_order(g, "naive")[0, 0] == 0
    assert ag_tile_order(g, "chunk_major")[0, 0] == 2
    with pytest.raises(ValueError):
        ag_tile_order(g, "random")


@pytest.mark.parametrize("m,tile_m", [(256, 128), (384, 128), (1024, 128), (128, 128), (640, 64)])
def test_items_cover_tile_rows(m, tile_m):
    g = GatherGrid(2, 0, m, tile_m, 1)
    covered = list(itertools.chain.from_iterable(g.tile_rows_of_item(i) for i in range(g.items_per_chunk)))
    assert covered == list(range(g.tiles_m_per_chunk))
    for tm in range(g.tiles_m_per_chunk):
        rows = range(tm * tile_m, min((tm + 1) * tile_m, m))
        assert g.item_of_tile_row(tm) == rows[-1] // TILE_ROW


def test_rs_band_major_produces_every_chunks_first_band_first():
    g = BandGrid(4, 1, 1024, 128, 3, band_tile_rows=2)
    tiles = rs_tile_order(g, "band_major")
    first_step = tiles[: 4 * 2 * 3]
    assert {tuple(t[:2]) for t in first_step} == {(c, tm) for c in range(4) for tm in (0, 1)}
    assert tiles[len(first_step) - 1][0] == 1  # own chunk last within a band
    row_major = rs_tile_order(g, "row_major")
    assert sorted(map(tuple, row_major)) == sorted(map(tuple, tiles))
    assert (row_major[: g.tiles_m_per_chunk * 3, 0] == 2).all()


def test_rs_reducer_order():
    g = BandGrid(2, 0, 500, 128, 2, band_tile_rows=2)
    assert g.bands == 2 and g.band_rows(1) == (256, 500)
    assert rs_reducer_order(g, 512, 2).tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    with pytest.raises(ValueError):
        rs_reducer_order(g, 500, 3)


H200 = Hardware(sms=132, link_GBps=450, mover_GBps_per_sm=25, builder_TFLOPs_per_sm=6)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("world", [1, 2, 4, 8])
@pytest.mark.parametrize("cap", [None, 116, 66, 33, 2])
def test_crews_fit_the_cap(kind, world, cap):
    c = crew_for(kind, world, 1024, 4096, 2048, H200, sm_cap=cap)
    assert c.grid == (cap or 132)
    assert c.movers + c.builders == c.grid
    assert c.builders >= 1
    if world == 1:
        assert c.movers == 0
    else:
        assert c.movers >= world - 1 or c.movers == c.grid - 1
        assert c.movers <= max(H200.link_saturating_movers, world - 1) + world


def test_crew_rules_follow_the_balance():
    # Wider gathered GEMMs need fewer movers; deeper RS contractions need fewer reducers.
    wide = crew_for("ag_tn", 8, 1024, 16384, 4096, H200)
    narrow = crew_for("ag_tn", 8, 1024, 256, 4096, H200)
    assert wide.movers <= narrow.movers
    deep = crew_for("tn_rs", 8, 1024, 4096, 8192, H200)
    shallow = crew_for("tn_rs", 8, 1024, 4096, 128, H200)
    assert deep.movers <= shallow.movers
    with pytest.raises(ValueError):
        crew_for("ag_gemm", 8, 1024, 4096, 4096, H200)


def test_hardware_table_loads():
    hw = hardware("NVIDIA H200", sms=132)
    assert hw.sms == 132 and hw.link_GBps > 0
    assert hardware("Some Other GPU").sms > 0


def test_tile_index_inverts_the_builders_raster():
    """tile_index must agree with the device's tile_of (mirrored by kosmos.gemm.tile_order)."""
    from kosmos import gemm
    from kosmos.tp.queues import tile_index

    group = gemm.device_constants()["kGroupM"]
    for a_shape, b_shape in [((1000, 64), (1280, 64)), ((128, 64), (64, 64)), ((4096, 128), (768, 128))]:
        shape = gemm.gemm_shape("TN", a_shape, b_shape)
        tm, tn, _ = gemm.tile_counts(shape)
        for i, (r, c) in enumerate(gemm.tile_order(shape)):
            assert tile_index(tm, tn, group, r, c) == i


def test_bench_maps_paper_shapes_onto_op_dims():
    """bench/tp.py: the paper's (M, N, K) per kernel -> (rows per rank, n, k) of our ops."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("bench_tp", Path(__file__).parents[1] / "bench" / "tp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.op_dims("ag_tn", 8192, 13312, 16384, 8) == (1024, 13312, 16384)
    assert mod.op_dims("tn_rs", 8192, 16384, 6656, 8) == (1024, 16384, 6656)
    assert mod.op_dims("ag_nn", 8192, 6656, 16384, 8) == (1024, 16384, 6656)    # dY[m, 16384] @ W[16384, 6656]
    assert mod.op_dims("bulk_ag_nn", 8192, 16384, 13312, 8) == (1024, 13312, 16384)
    assert mod.op_dims("bulk_rs_nt", 13312, 16384, 8192, 8) == (1024, 13312, 16384)  # dW[13312, 16384], 8192 tokens


# ---- the fused ops' launch-argument cache (plan objects built without a GPU) ----

class _Operand:
    """A stand-in array: _run reads only .data.ptr."""

    def __init__(self, ptr: int):
        self.data = types.SimpleNamespace(ptr=ptr)


def _stand_in_op():
    from kosmos.tp.ops import AllGatherMatmul

    op = object.__new__(AllGatherMatmul)
    op.heap, op._args, op.epoch, op._ctx, op._failures_at_build = object(), {}, 0, "ctx", 0
    joined: list = []  # the streams each launch was ordered on (World.order)
    op.world = types.SimpleNamespace(check=lambda: None, status=types.SimpleNamespace(failures=0),
                                     order=types.SimpleNamespace(join=lambda s, **_: joined.append(s), joined=joined))
    launched = []  # (the maps, the params record's bytes) at each launch: the record is reused
    op.launch = lambda args, stream=None: launched.append((args[:3], args[3].tobytes()))
    return op, launched


def test_launch_arguments_are_built_once_per_address_set_and_only_the_epoch_changes():
    op, launched = _stand_in_op()
    builds = []

    def build():
        builds.append(1)
        return ["tma", "tmb", "tmc", record(AG_PARAMS_DTYPE, m=128 * len(builds))]

    a, b, c = _Operand(16), _Operand(32), _Operand(48)
    for operands in ((a, b), (a, b), (a, c)):
        op._run(operands, build, None)
    assert len(builds) == 2
    recs = np.frombuffer(b"".join(raw for _, raw in launched), AG_PARAMS_DTYPE).copy()
    assert [int(r["c"]["epoch"]) for r in recs] == [1, 2, 3]
    assert [int(r["m"]) for r in recs] == [128, 128, 256]  # the third address set built its own record
    recs[1]["c"]["epoch"] = recs[0]["c"]["epoch"]
    assert recs[0] == recs[1]  # nothing but the epoch changed between two calls


def test_a_call_that_fails_before_its_launch_does_not_take_an_epoch():
    op, launched = _stand_in_op()

    def fails():
        raise ValueError("could not encode a TMA map")

    with pytest.raises(ValueError):
        op._run((_Operand(16),), fails, None)
    assert op.epoch == 0 and not launched


def test_a_closed_plan_refuses_before_building_anything():
    from kosmos.errors import KosmosError

    op, launched = _stand_in_op()
    op.heap = None
    with pytest.raises(KosmosError, match="closed"):
        op._run((_Operand(16),), lambda: 1 / 0, None)
    assert not launched


# ---- constructors and calls on stand-ins (no GPU): argument checks, device order, plan lifetimes ----

def _fake_world(comm):
    """What a fused op's constructor reads before it needs a GPU (hardware(), the heap)."""
    return types.SimpleNamespace(require_gpu=lambda: None, comm=comm, size=comm.size, rank=comm.rank)


@pytest.mark.parametrize("arg,value", [("sm_cap", 0), ("sm_cap", -4), ("sm_cap", True), ("sm_cap", 8.0),
                                       ("sm_cap", "8"), ("movers", -1), ("movers", True), ("movers", 1.5)])
@pytest.mark.parametrize("op", ["AllGatherMatmul", "MatmulReduceScatter", "BulkReduceScatterMatmul"])
def test_sm_cap_and_movers_are_checked_before_the_heap(arg, value, op):
    """sm_cap = 0 would have read as the whole GPU (crew_for's `sm_cap or sms`), a bool as 1: both are
    refused with the op's other checks, before hardware() and the heap (which need a GPU here)."""
    from fakes import FakeComm

    from kosmos.tp import ops

    with pytest.raises(ValueError, match=f"{arg} must be an integer >= {1 if arg == 'sm_cap' else 0}"):
        getattr(ops, op)(_fake_world(FakeComm(0, 2)), 128, 64, 64, **{arg: value})


def test_a_refusal_on_one_rank_reaches_the_others():
    """True == 1 passes the agreement, so one rank may refuse what another accepts: the checks run
    collectively, and the rank that accepted raises too instead of waiting in the heap's exchange."""
    from fakes import FakeComm

    from kosmos.errors import KosmosError
    from kosmos.tp.ops import AllGatherMatmul

    peer = "ValueError: sm_cap must be an integer >= 1 (or None), got True"
    comm = FakeComm(0, 2, peers=lambda v: [v, peer] if v is None else [v, v])  # all_ok sends None when fine
    with pytest.raises(KosmosError, match="another rank failed checking AllGatherMatmul's arguments: rank 1: "
                                          "ValueError: sm_cap"):
        AllGatherMatmul(_fake_world(comm), 128, 64, 64, sm_cap=1)


def test_crew_for_refuses_a_zero_cap():
    with pytest.raises(ValueError, match="sm_cap must be at least 1"):
        crew_for("ag_tn", 1, 1024, 4096, 2048, H200, sm_cap=0)


def test_nn_nt_refuses_two_way_after_the_agreement():
    """A rank passing two_way while its peer passes one_way raises the agreement's error like its peer
    (it used to raise its own before the agreement, leaving the peer waiting in it)."""
    from fakes import FakeComm

    from kosmos.errors import KosmosError
    from kosmos.tp.ops import AllGatherMatmulNNNT

    def peers(v):  # rank 1 passed the same arguments but policy one_way
        return [v, tuple("one_way" if x == "two_way" else x for x in v)] if isinstance(v, tuple) else [v, v]

    with pytest.raises(KosmosError, match="ranks disagree on AllGatherMatmulNNNT shape and switches"):
        AllGatherMatmulNNNT(_fake_world(FakeComm(0, 2, peers=peers)), 128, 64, 64, policy="two_way")
    with pytest.raises(ValueError, match="two_way is not built for it"):  # every rank passed it: each raises
        AllGatherMatmulNNNT(_fake_world(FakeComm(0, 2)), 128, 64, 64, policy="two_way")


def _heap_bytes(monkeypatch, cls, P, **kw):
    """The heap size a constructor asks for at world size P (on the H200's SM count)."""
    from fakes import FakeComm

    from kosmos import plan
    from kosmos.tp import ops

    class Built(Exception):
        pass

    def heap(self, world, nbytes):
        raise Built(nbytes)

    monkeypatch.setattr(ops, "device_name", lambda: "NVIDIA H200")
    monkeypatch.setattr(ops, "sm_count", lambda: 132)
    monkeypatch.setattr(plan.SymmetricPlan, "__init__", heap)
    with pytest.raises(Built) as e:
        cls(_fake_world(FakeComm(0, P)), 256, 512, 1024, **kw)
    return e.value.args[0]


def test_reduce_scatters_stage_nothing_alone(monkeypatch):
    """Alone the kernel never touches the staging (hipsrc/tp.hip gemm_rs): the heap holds none."""
    from kosmos.dtypes import float32
    from kosmos.tp.ops import BulkReduceScatterMatmul, MatmulReduceScatter

    m, n, k = 256, 512, 1024
    assert _heap_bytes(monkeypatch, MatmulReduceScatter, 1) == 0
    assert _heap_bytes(monkeypatch, BulkReduceScatterMatmul, 1) == 0
    assert _heap_bytes(monkeypatch, MatmulReduceScatter, 2) == 2 * 2 * m * n * 2
    assert _heap_bytes(monkeypatch, MatmulReduceScatter, 4, staging_dtype=float32) == 2 * 4 * m * n * 4
    assert _heap_bytes(monkeypatch, BulkReduceScatterMatmul, 2) == 2 * 2 * m * k * 2


def test_reduce_setup_alone_allocates_no_staging_and_passes_none(monkeypatch):
    import cupy

    from kosmos.tp.heuristics import Crew
    from kosmos.tp.ops import MatmulReduceScatter

    op = object.__new__(MatmulReduceScatter)
    op.P, op.m, op.crew = 1, 256, Crew(0, 0, 8, 8)
    op.world = types.SimpleNamespace(rank=0, comm=None)
    op.heap = types.SimpleNamespace(alloc=lambda *a: pytest.fail("alone, nothing is allocated on the heap"))
    monkeypatch.setattr(cupy, "asarray", lambda a: _Operand(4096))  # the reducers' table (unused alone)
    op._setup_reduce(512, np.dtype(np.float32))
    assert op.staging is None and op.staging_buffers == [] and op.buffer_bytes == 0
    op._kernel_args = lambda a, b, c, params, **fields: fields
    op._epi = lambda *a: None
    arr = _Operand(256)
    arr.shape = (256, 512)
    fields = op._reduce_args(arr, arr, arr, arr, arr)
    assert (fields["staging_off"], fields["buffer_bytes"], fields["n_reduce_items"]) == (0, 0, 0)


def test_every_constructor_ends_in_the_launch_that_waits_for_its_tables(monkeypatch):
    """The order tables are uploaded on the constructor's stream: _launch, the last step of every
    op's constructor, waits for them before a first call on any stream."""
    import ast
    import inspect

    import cupy

    from kosmos import gemm
    from kosmos.tp import ops

    for cls in (ops.AllGatherMatmul, ops.AllGatherMatmulNNNT, ops.BulkAllGatherMatmul, ops.MatmulReduceScatter,
                ops.BulkReduceScatterMatmul):
        body = ast.parse(inspect.getsource(cls)).body[0]
        init = next(f for f in body.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
        assert ast.unparse(init.body[-1]).startswith("self.launch = self._launch("), cls.__name__

    steps = []
    monkeypatch.setattr(ops, "load_module", lambda *a, **kw: types.SimpleNamespace(get_function=lambda name: name))
    monkeypatch.setattr(ops.PersistentLaunch, "checked", staticmethod(lambda fn, *a: steps.append(("launch", fn))))
    monkeypatch.setattr(gemm, "shared_mem_bytes", lambda: 0)
    monkeypatch.setattr(cupy.cuda.runtime, "deviceSynchronize", lambda: steps.append("sync"))
    op = object.__new__(ops.AllGatherMatmul)
    op.world, op.tile_n, op.crew = None, 192, types.SimpleNamespace(grid=8)
    op._launch("kosmos_tp_ag_tn")
    assert steps == [("launch", "kosmos_tp_ag_tn_n192"), "sync"]


def test_alone_the_mxfp8_dequantize_into_the_scratch_follows_the_device_order(monkeypatch):
    """The scratch may still be the previous call's GEMM operand on another stream: the call joins
    the World's device order before it dequantizes there (on the stream its kernel then uses)."""
    from kosmos.tp import ops

    op, _ = _stand_in_op()
    steps = []
    op.world.order.join = lambda s, **_: steps.append(("join", s))
    monkeypatch.setattr(ops.mx, "dequantize_device", lambda x, out, stream: steps.append(("dequantize", stream)))
    op.P, op.precision, op._scratch = 1, "mxfp8", {0: "scratch"}
    assert op._gathered("x", None, "s1") == "scratch"
    assert steps == [("join", "s1"), ("dequantize", "s1")]
    op.heap = None  # a closed plan refuses before writing anything
    with pytest.raises(Exception, match="closed"):
        op._gathered("x", None, "s2")
    assert len(steps) == 2


class _FakePlan:
    built: list = []

    def __init__(self, world, m, n, k, **kw):
        self.m, self.stale, self.closed = m, False, False
        _FakePlan.built.append(self)

    def close(self):
        self.closed = True


def test_layer_plans_are_rebuilt_after_a_failure_and_closed_with_the_layer():
    from kosmos.errors import KosmosError
    from kosmos.tp.layers import _Linear

    failed = []

    def check():
        if failed:
            raise KosmosError("this World failed earlier")

    _FakePlan.built = []
    layer = _Linear(types.SimpleNamespace(check=check), None, "bf16")
    a = layer._plan(_FakePlan, 128, 64, 64)
    assert layer._plan(_FakePlan, 128, 64, 64) is a
    b = layer._plan(_FakePlan, 256, 64, 64)
    failed.append(1)  # a device timeout, not cleared yet: no plan is touched
    with pytest.raises(KosmosError, match="failed earlier"):
        layer._plan(_FakePlan, 128, 64, 64)
    assert not a.closed
    failed.clear()  # World.clear_failure: the plans built before are stale
    a.stale = b.stale = True
    c = layer._plan(_FakePlan, 128, 64, 64)
    assert c is not a and a.closed and b.closed and list(layer._plans.values()) == [c]
    d = layer._plan(_FakePlan, 512, 64, 64)
    layer.close()
    assert c.closed and d.closed and not layer._plans
    assert layer._plan(_FakePlan, 128, 64, 64) is _FakePlan.built[-1]  # a later call builds anew
