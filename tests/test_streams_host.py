"""Host logic of streams, aliasing and symmetric allocation, on the CPU (the device side: tests/gpu/test_protocol.py)."""
from __future__ import annotations

import ctypes
import types

import pytest
from fakes import FakeComm

from kosmos import World, symmetric
from kosmos.arrays import refuse_overlap
from kosmos.errors import KosmosError, KosmosResourceError
from kosmos.runtime.streams import uses_stream


class FakeStream:
    def __init__(self) -> None:
        self.entered = 0

    def __enter__(self) -> "FakeStream":
        self.entered += 1
        return self

    def __exit__(self, *exc: object) -> None:
        pass


@uses_stream
def call(x: int, out: int | None = None, stream: FakeStream | None = None) -> int:
    return x


def test_uses_stream_makes_the_calls_stream_current() -> None:
    s = FakeStream()
    assert call(1, stream=s) == 1 and s.entered == 1
    assert call(2, None, s) == 2 and s.entered == 2  # positional
    assert call(3) == 3  # no stream: the current one, nothing entered


class Arr:
    def __init__(self, ptr: int, nbytes: int) -> None:
        self.data, self.nbytes = types.SimpleNamespace(ptr=ptr), nbytes


def test_refuse_overlap() -> None:
    out = Arr(1000, 100)
    refuse_overlap("out", out, x=Arr(1100, 50), w=Arr(900, 100), none=None)  # touching is not overlapping
    with pytest.raises(ValueError, match="out overlaps x in memory"):
        refuse_overlap("out", out, x=Arr(1099, 8))
    with pytest.raises(ValueError, match="dw overlaps dy"):
        refuse_overlap("dw", Arr(0, 64), dy=Arr(0, 64))  # the same array
    refuse_overlap("out", out, empty=Arr(1000, 0))


class FakeHip:
    def __init__(self, err: int = 0) -> None:
        self.err, self.calls = err, []

    def hipExtMallocWithFlags(self, ptr_ref, size, flags) -> int:  # noqa: ANN001, N802
        self.calls.append((size.value, flags.value))
        if not self.err:
            ctypes.cast(ptr_ref, ctypes.POINTER(ctypes.c_void_p))[0] = 0x7F00_0000_0000
        return self.err


def test_amd_heap_is_uncached_fine_grained(monkeypatch: pytest.MonkeyPatch) -> None:
    lib = FakeHip()
    assert symmetric.hip_ext_malloc(4096, symmetric.HIP_DEVICE_MALLOC_UNCACHED, lib) == 0x7F00_0000_0000
    assert lib.calls == [(4096, 0x3)]
    with pytest.raises(KosmosResourceError, match=r"hipExtMallocWithFlags\(4096 B, flags 0x3\) failed with hipError 2"):
        symmetric.hip_ext_malloc(4096, 0x3, FakeHip(err=2))
    seen = []
    monkeypatch.setattr(symmetric, "hip_ext_malloc", lambda n, flags: seen.append((n, flags)) or 0x1000)
    assert symmetric.device_malloc(256, is_hip=True) == 0x1000
    assert seen == [(256, symmetric.HIP_DEVICE_MALLOC_UNCACHED)]


def test_finalize_refuses_heap_lists_that_differ() -> None:
    comm = FakeComm(0, 2, peers=lambda v: [v, [4096] if isinstance(v, list) else v])  # rank 1 holds one heap
    w = World(comm, gpu=False)
    w._heaps = [types.SimpleNamespace(nbytes=4096), types.SimpleNamespace(nbytes=8192)]
    with pytest.raises(KosmosError, match=r"ranks disagree on the symmetric heaps to free at finalize"):
        w.finalize()


# ---- device order (kosmos.runtime.streams.DeviceOrder) on stand-in streams and events ----

class OrderStream:
    """A stand-in CuPy stream: logs the events it waits for, and can capture (a graph that logs its replays)."""

    def __init__(self, ptr: int, log: list) -> None:
        self.ptr, self.log, self.capturing = ptr, log, False

    def is_capturing(self) -> bool:
        return self.capturing

    def wait_event(self, event: "OrderEvent") -> None:
        self.log.append(("wait", self.ptr, event.on))

    def __enter__(self) -> "OrderStream":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def begin_capture(self) -> None:
        self.capturing = True

    def end_capture(self) -> types.SimpleNamespace:
        self.capturing = False
        return types.SimpleNamespace(launch=lambda s: self.log.append(("replay", s.ptr)))


class OrderEvent:
    log: list = []

    def __init__(self, **kw: object) -> None:
        self.on = None

    def record(self, stream: OrderStream) -> None:
        self.on = stream.ptr
        OrderEvent.log.append(("record", stream.ptr))


@pytest.fixture
def order_log(monkeypatch: pytest.MonkeyPatch) -> list:
    """Events recorded and waited for, in order; the per-GPU orders start empty."""
    cupy = pytest.importorskip("cupy")
    from kosmos.runtime import streams

    monkeypatch.setattr(cupy.cuda, "Event", OrderEvent)
    monkeypatch.setattr(streams, "_device_orders", {})
    monkeypatch.setattr(OrderEvent, "log", [])
    return OrderEvent.log


def _gpu_world(monkeypatch: pytest.MonkeyPatch, comm: FakeComm) -> World:
    """A one-rank World 'on GPU 0' (its constructor's device calls stood in)."""
    import cupy

    from kosmos import world
    from kosmos.runtime import status

    monkeypatch.setattr(world, "visible_gpus", lambda: 1)
    monkeypatch.setattr(world, "_process_gpu", None)
    monkeypatch.setattr(cupy.cuda, "Device", lambda i: types.SimpleNamespace(use=lambda: None))
    monkeypatch.setattr(status, "DeviceStatus", lambda rank, budget: types.SimpleNamespace(failures=0))
    return World(comm, gpu=True)


def test_the_worlds_on_one_gpu_share_its_order(monkeypatch: pytest.MonkeyPatch, order_log: list) -> None:
    """A TP and an EP World on one GPU: the EP op on another stream waits for the TP op (it used to
    run beside it: each World had its own order)."""
    from kosmos.runtime.streams import device_order

    tp, ep = _gpu_world(monkeypatch, FakeComm()), _gpu_world(monkeypatch, FakeComm())
    assert tp.device_id == ep.device_id == 0
    assert tp.order is ep.order is device_order(0) and device_order(1) is not device_order(0)
    s1, s2 = OrderStream(1, order_log), OrderStream(2, order_log)
    tp.order.join(s1)
    ep.order.join(s2)
    assert order_log == [("record", 1), ("wait", 2, 1)]
    assert World(FakeComm(), gpu=False).order is not device_order(0)  # no GPU, no shared order


def test_stream_k_plans_join_the_gpus_order_plain_plans_keep_their_own(monkeypatch: pytest.MonkeyPatch,
                                                                         order_log: list) -> None:
    """Stream-K finishers wait on other CTAs of their launch: such a grid must not overlap a World's.
    A plain GEMM waits on nothing (beside a World's grid it is only slower): its plan's own order."""
    import cupy

    from kosmos import gemm, runtime
    from kosmos.runtime.streams import device_order

    monkeypatch.setattr(gemm, "_stream_k_state", {})
    monkeypatch.setattr(cupy, "empty", lambda *a, **kw: "workspace")
    monkeypatch.setattr(cupy, "zeros", lambda *a, **kw: "counters")
    monkeypatch.setattr(runtime, "DeviceStatus", lambda rank: "status")
    assert gemm.stream_k_shared(0, 132)[3] is device_order(0)
    plain = gemm.GemmPlan(None, None, "", 1, 1, (1, 1, 1), None, None)
    assert plain._order is not device_order(0)


def test_a_replay_joins_the_orders_its_captured_calls_joined(order_log: list) -> None:
    """An eager call of a captured plan on another stream, then the replay: the replay waits for it,
    and the next eager call waits for the replay (the replay used to join only the World's order)."""
    from kosmos import graphs
    from kosmos.runtime import streams
    from kosmos.runtime.streams import DeviceOrder

    plan, unrelated = DeviceOrder(), DeviceOrder()  # a GEMM plan's order; another plan's
    cap, other = OrderStream(1, order_log), OrderStream(2, order_log)
    plan.join(cap)  # the eager step on the capture stream
    with graphs.capture(cap) as step:
        plan.join(cap)  # the captured call: it follows the eager step on this stream, no event
        unrelated.join(other)  # not on the capture stream: not the graph's
    assert len(step.orders) == 1 and step.orders[0] is plan and not streams._recording
    assert order_log == []
    plan.join(other)  # an eager call of the same plan on another stream
    step.launch()
    plan.join(other)  # and one after the replay
    assert order_log == [("record", 1), ("wait", 2, 1),                 # the eager call after the capture
                         ("record", 2), ("wait", 1, 2), ("replay", 1),  # the replay after the eager call
                         ("record", 1), ("wait", 2, 1)]                 # the next eager call after the replay


def test_a_captured_call_must_follow_the_orders_last_stream(order_log: list) -> None:
    """The capture rule join enforces, unchanged: a capture cannot wait on an event."""
    from kosmos import graphs
    from kosmos.runtime.streams import DeviceOrder

    order = DeviceOrder()
    cap, other = OrderStream(1, order_log), OrderStream(2, order_log)
    order.join(other)
    with pytest.raises(KosmosError, match="must follow this device's"):
        with graphs.capture(cap):
            order.join(cap)
    assert not cap.capturing and order_log == []
