"""Streams: a call's `stream=` made current for everything the call does, and device order for
launches that share device state.

kosmos plans keep state on the device between calls (epoch-compared flags, queue heads, a GEMM's
monotonic queue base), so two of their launches must never overlap: a persistent grid waiting on a
peer beside another one can deadlock across ranks when ranks start them in different orders.
`DeviceOrder` keeps such launches in issue order on the device whatever stream each is issued on:
when the stream changes, the new stream first waits for an event recorded on the previous one.
Every World on a GPU shares that GPU's order (`device_order`): a TP and an EP World are two
Worlds, and their persistent grids must not overlap either.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from typing import Any, Callable, Iterator, TypeVar

from ..errors import KosmosError

F = TypeVar("F", bound=Callable[..., Any])


class DeviceOrder:
    """One order on the device for a set of launches (every World's ops and the stream-K GEMMs on one
    GPU: device_order; one plain GEMM plan's calls)."""

    def __init__(self) -> None:
        self._last: Any = None
        # Held around "join, then launch" by callers whose calls may come from several threads (GEMM
        # plans, graph replays). World ops do not take it: they are issued from one thread, in the same
        # order on every rank; a stream-K GEMM is in order with them when called from that thread.
        self.lock = threading.Lock()

    def join(self, stream: Any, capturable: bool = True, who: str = "this op") -> None:
        """Order the next launch, on `stream` (None: the current stream), after every earlier one.
        capturable=False: the launch takes its call epoch from the host, so it refuses a stream
        that is capturing a CUDA graph (a replay would repeat the epoch)."""
        import cupy

        s = cupy.cuda.get_current_stream() if stream is None else stream
        if not capturable and capturing(s):
            raise KosmosError(f"{who} takes its call epoch from the host: it cannot be captured in a CUDA graph "
                              f"(kosmos.graphs says what can)")
        last = self._last
        if last is not None and last.ptr != s.ptr:
            if capturing(s) or capturing(last):
                raise KosmosError("a captured kosmos call must follow this device's (or plan's) previous kosmos "
                                  "calls on the capture stream, and no other stream may issue kosmos calls during "
                                  "a capture: make one eager call on the capture stream first (kosmos.graphs)")
            event = cupy.cuda.Event(block=False, disable_timing=True, interprocess=False)
            event.record(last)  # after all that was issued on the previous stream, that launch included
            s.wait_event(event)
        self._last = s
        orders = _recording.get(s.ptr)
        if orders is not None and self not in orders:  # a capture on s: its replays join this order too
            orders.append(self)


_device_orders: dict[int, DeviceOrder] = {}
_device_orders_lock = threading.Lock()


def device_order(device_id: int) -> DeviceOrder:
    """The order of GPU `device_id` (this process's numbering), shared by every World there and by
    the launches that wait on other CTAs of their grid (stream-K GEMMs): such a persistent grid needs
    all its CTAs resident, so two of them beside each other can deadlock (across ranks, or a stream-K
    finisher waiting on CTAs that cannot start)."""
    with _device_orders_lock:
        order = _device_orders.get(device_id)
        if order is None:
            order = _device_orders[device_id] = DeviceOrder()
        return order


_recording: dict[int, list[DeviceOrder]] = {}  # capture stream's ptr -> the orders joined on it


@contextlib.contextmanager
def recording_joins(stream: Any, orders: list[DeviceOrder]) -> Iterator[list[DeviceOrder]]:
    """While the block runs, append to `orders` (once each) every DeviceOrder joined on `stream`:
    kosmos.graphs.capture keeps them so that a replay joins them as an eager call would."""
    _recording[stream.ptr] = orders
    try:
        yield orders
    finally:
        del _recording[stream.ptr]


def capturing(s: Any) -> bool:
    """Is stream s capturing a CUDA graph (never on HIP: CuPy captures on CUDA only)."""
    import cupy

    return not cupy.cuda.runtime.is_hip and s.is_capturing()


def uses_stream(fn: F) -> F:
    """Run a call with its `stream` argument current, so its allocations, host-to-device copies and
    memcpys are ordered on that stream as its launches are (CuPy's pool binds memory to a stream)."""
    params = list(inspect.signature(fn).parameters)
    at = params.index("stream")

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        stream = kwargs.get("stream", args[at] if len(args) > at else None)
        if stream is None:
            return fn(*args, **kwargs)
        with stream:
            return fn(*args, **kwargs)

    return call  # type: ignore[return-value]
