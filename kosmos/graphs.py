"""CUDA-graph capture of kosmos calls, with the memory the graph writes kept for it.

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:                                   # one eager step first, on the capture stream
        y, ctx = layer.forward(x, params)
        layer.backward(dy, ctx, params)
    with kosmos.graphs.capture(stream) as step:    # every rank captures the same calls
        y, ctx = layer.forward(x, params)
        grads = layer.backward(dy, ctx, params)
    for batch, grad in data:                       # new values in the captured inputs, then replay
        copy_into(x, batch, stream); copy_into(dy, grad, stream)
        step.launch()                              # y and grads hold this step's results

Why the eager step: it builds the plans and compiles the kernels (neither can happen inside a
capture), and it puts the World's device order on this stream (kosmos orders launches across
streams with events, which a capture cannot wait on: a captured call that would need one raises).

Memory: CuPy's pool hands a call's temporaries back when the call returns, and would give them to
the next allocation while the graph still writes them on every replay. So during the capture every
allocation comes from a pool of the graph's own, which the CapturedGraph keeps: the arrays the
captured calls returned (y, grads) and their temporaries stay the graph's while it lives. Drop the
CapturedGraph and those temporaries go back to the device.

What replays: kernel arguments are fixed at capture (pointers, shapes, token counts), and every
kosmos op used on a captured path keeps its per-call state on the device (GEMM tile queues, the MoE
plans' call counts: hipsrc/kosmos/calls.h), so a replay computes a new routing from new tokens.
CUDA only: CuPy's stream capture does not support HIP.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator


class CapturedGraph:
    """A captured cupy.cuda.graph.Graph, its stream, and the memory pool its allocations came from."""

    def __init__(self, stream: Any, pool: Any):
        self.stream, self.pool = stream, pool
        self.graph: Any = None

    def launch(self, stream: Any = None) -> None:
        """Replay on `stream` (default: the capture stream, which keeps the World's device order)."""
        if self.graph is None:
            raise RuntimeError("the capture has not finished")
        self.graph.launch(self.stream if stream is None else stream)


@contextlib.contextmanager
def capture(stream: Any) -> Iterator[CapturedGraph]:
    """Capture what the block issues on `stream` (made current, its allocations from the graph's
    own pool); the CapturedGraph's `graph` is set when the block exits. An exception inside the
    block ends the capture and propagates (no graph)."""
    import cupy

    if cupy.cuda.runtime.is_hip:
        raise NotImplementedError("CUDA-graph capture: CuPy's stream capture does not support HIP")
    if stream is None or stream.ptr == 0:
        raise ValueError("capture needs a created stream (cupy.cuda.Stream(non_blocking=True)), not the null stream")
    captured = CapturedGraph(stream, cupy.cuda.MemoryPool())
    with stream, cupy.cuda.using_allocator(captured.pool.malloc):
        stream.begin_capture()
        try:
            yield captured
        finally:
            graph = stream.end_capture()
    captured.graph = graph
