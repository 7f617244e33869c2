"""CUDA-graph capture of kosmos calls, with the memory the graph writes kept for it.

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:                                   # one eager step first, on the capture stream
        y, ctx = layer.forward(x, params)
        layer.backward(dy, ctx, params)
    with kosmos.graphs.capture(stream, world) as step:  # every rank captures the same calls
        y, ctx = layer.forward(x, params)
        grads = layer.backward(dy, ctx, params)
    for batch, grad in data:                       # new values in the captured inputs, then replay
        copy_into(x, batch, stream); copy_into(dy, grad, stream)
        step.launch()                              # y and grads hold this step's results

Why the eager step: it builds the plans and compiles the kernels (neither can happen inside a
capture), and it puts the device orders (the GPU's, each GEMM plan's) on this stream (kosmos orders
launches across streams with events, which a capture cannot wait on: a captured call that would need
one raises).

Memory: CuPy's pool hands a call's temporaries back when the call returns, and would give them to
the next allocation while the graph still writes them on every replay. So during the capture every
allocation comes from a pool of the graph's own, which the CapturedGraph keeps: the arrays the
captured calls returned (y, grads) and their temporaries stay the graph's while it lives. Drop the
CapturedGraph and those temporaries go back to the device.

What replays: kernel arguments are fixed at capture (pointers, shapes, token counts). The ops that
keep their per-call state on the device capture: kosmos.matmul and grouped_matmul (tile queues
reset by the last CTA), the MoE plans (MoEDispatch, MoECombine: call counts, hipsrc/kosmos/calls.h)
and so MoELayer's device and fused paths, whose replays compute a new routing from new tokens. The
collectives and the TP+SP ops still take their call epochs from the host: called inside a capture
they raise (a replay would repeat the epoch). A replay joins every device order its captured calls
joined (the GPU's, each GEMM plan's: kosmos.runtime.streams.DeviceOrder), so eager calls of the same
plans on other streams (which share their tile queues) and replays run one after another, as eager
calls do. CUDA only: CuPy's stream capture does not support HIP.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

from .runtime.streams import recording_joins


class CapturedGraph:
    """A captured cupy.cuda.graph.Graph, its stream, the memory pool its allocations came from, and
    (when given) the World whose ops it replays."""

    def __init__(self, stream: Any, pool: Any, world: Any = None):
        self.stream, self.pool, self.world = stream, pool, world
        self.graph: Any = None
        self._failures = None if world is None else world.status.failures
        self.orders: list = []  # the DeviceOrders the captured calls joined (streams.recording_joins)

    def launch(self) -> None:
        """Replay on the capture stream, after every earlier launch ordered by the device orders its
        calls joined (the GPU's, each GEMM plan's), as eager calls would be, and before later
        ones on any stream; refused after a device timeout since the capture (the cross-rank
        protocols' state is unknown then: rebuild the plans and capture again)."""
        if self.graph is None:
            raise RuntimeError("the capture has not finished")
        orders = list(self.orders)
        if self.world is not None:
            self.world.check()
            if self.world.status.failures != self._failures:
                from .errors import KosmosError

                raise KosmosError("a device timeout happened since this graph was captured: its plans may not "
                                  "run again; build new plans and capture again")
            if self.world.order not in orders:
                orders.append(self.world.order)
        with contextlib.ExitStack() as held:
            for order in sorted(orders, key=id):  # as GEMM calls from other threads do: join, then launch
                held.enter_context(order.lock)
            for order in orders:
                order.join(self.stream)  # and the replay is the last use of each: later calls wait for it
            self.graph.launch(self.stream)


@contextlib.contextmanager
def capture(stream: Any, world: Any = None) -> Iterator[CapturedGraph]:
    """Capture what the block issues on `stream` (made current, its allocations from the graph's
    own pool); the CapturedGraph's `graph` is set when the block exits. `world`: the World whose ops
    the block calls (its replays are then ordered and checked as eager calls are). An exception
    inside the block ends the capture and propagates (no graph). Keep the CapturedGraph as long as
    the arrays the captured calls returned are used: their memory is its pool's."""
    import cupy

    if cupy.cuda.runtime.is_hip:
        raise NotImplementedError("CUDA-graph capture: CuPy's stream capture does not support HIP")
    if stream is None or stream.ptr == 0:
        raise ValueError("capture needs a created stream (cupy.cuda.Stream(non_blocking=True)), not the null stream")
    captured = CapturedGraph(stream, cupy.cuda.MemoryPool(), world)
    with stream, cupy.cuda.using_allocator(captured.pool.malloc), recording_joins(stream, captured.orders):
        stream.begin_capture()
        try:
            yield captured
        except BaseException:
            try:
                stream.end_capture()  # the block's error is the one to see, not an invalidated capture's
            except Exception:  # noqa: BLE001
                pass
            raise
        captured.graph = stream.end_capture()
