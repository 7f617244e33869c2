"""DeviceRecord: a kernel's parameter record kept in device memory, for kernels whose records
outgrow their parameters (HIP holds 4 KB of them; the MoE backward's jobs take more).

    rec = DeviceRecord(dtype)              # one device slot of a mirrored struct's dtype
    slot = rec.put(value, stream)          # value (an np.void of dtype) -> the slot (a kernel's pointer)

`put` launches hipsrc/records.hip's kosmos_put_words with the record's bytes as that launch's
parameters, on the stream the kernel that reads the record runs on: stream order makes the bytes
visible to it, a CUDA graph that captures both launches replays them with the same bytes, and
nothing waits on the host. One slot per DeviceRecord: the next put overwrites it, so its caller
orders it after the launch that read the last one (a plan's put follows plan._join, which orders
the call after every earlier launch of the GPU's World ops, whatever its stream). A put of the
bytes the slot already holds launches nothing (an eager caller with memoized records: one launch
less a call), until a put is captured in a CUDA graph: its replays may rewrite the slot at any
time, so from then on every put launches. The device code reads TMA maps in such a record after
gemm::JobRecord::acquire_maps.
"""
from __future__ import annotations

from typing import Any

import numpy as np

# hipsrc/kosmos/records.h kRecordWords: the u64 words one put carries (mirrored)
WORDS = 480
WORDS_DTYPE = np.dtype([("w", np.uint64, (WORDS,))])  # RecordWords


class DeviceRecord:
    def __init__(self, dtype: np.dtype):
        import cupy

        from .module import load_module

        dtype = np.dtype(dtype)
        if dtype.itemsize % 8 or dtype.itemsize > 8 * WORDS:
            raise ValueError(f"a device record is whole 8-byte words, at most {8 * WORDS} B; {dtype} is "
                             f"{dtype.itemsize} B")
        self.dtype = dtype
        # 128-byte aligned (CuPy's allocations are 512-byte aligned): TMA maps need 64
        self.slot = cupy.zeros(dtype.itemsize // 8, np.uint64)
        self._put = load_module("records.hip").get_function("kosmos_put_words")
        self._held: bytes | None = None  # the slot's bytes after the last put; None: unknown
        self._captured = False           # a put was captured: a graph's replays rewrite the slot

    def put(self, value: np.void, stream: Any = None) -> Any:
        """Write `value` (a record of this dtype) into the slot, in `stream`'s order; the slot (a
        device array: pass it as the kernel's pointer)."""
        import cupy

        from .streams import capturing

        if value.dtype != self.dtype:
            raise TypeError(f"a record of {self.dtype} is needed, got {value.dtype}")
        raw = value.tobytes()
        self._captured = self._captured or capturing(cupy.cuda.get_current_stream() if stream is None else stream)
        if raw == self._held and not self._captured:
            return self.slot  # stream order: the put that wrote these bytes precedes this call's launch
        words = np.zeros((), WORDS_DTYPE)
        n = self.dtype.itemsize // 8
        words["w"][:n] = np.frombuffer(raw, np.uint64)
        self._put((1,), (128,), (words[()], self.slot, np.int32(n)), stream=stream)
        self._held = None if self._captured else raw
        return self.slot
