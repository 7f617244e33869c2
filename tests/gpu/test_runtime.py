"""World, SymmetricHeap, the compile options and bounded waits, on the GPU."""
from __future__ import annotations

import numpy as np
import pytest

import kosmos
from kosmos.runtime import PersistentLaunch, kernel_id, load_module, sm_count
from kosmos.symmetric import SymmetricHeap

from .conftest import cupy


def test_world_binds_a_gpu(world):
    assert world.device_id == world.local_rank % world.num_gpus
    assert cupy.cuda.Device().id == world.device_id
    assert world.oversubscribed == (world.local_size > world.num_gpus)


def test_heap_peers_see_each_others_memory(world):
    heap = SymmetricHeap(world, 1 << 20)
    a = heap.alloc((world.size, 4), np.uint32)
    a.local[...] = cupy.uint32(0xDEAD0000 + world.rank)
    cupy.cuda.Device().synchronize()
    world.barrier()
    # Read every peer's allocation through the peer pointers, with a plain device-to-device copy.
    for r in range(world.size):
        got = np.empty((world.size, 4), np.uint32)
        cupy.cuda.runtime.memcpy(got.ctypes.data, a.peer_ptr(r), got.nbytes, cupy.cuda.runtime.memcpyDeviceToHost)
        assert (got == 0xDEAD0000 + r).all()
    world.barrier()
    heap.barrier()
    heap.barrier()
    world.synchronize()


def test_arch_specific_features_are_on():
    """CuPy adds its own -arch; ours must win on Hopper, or wgmma silently disappears."""
    if cupy.cuda.runtime.is_hip or cupy.cuda.Device().compute_capability != "90":
        pytest.skip("Hopper only")
    src = r'''
    extern "C" __global__ void probe(int* out) {
    #if defined(__CUDA_ARCH_FEAT_SM90_ALL)
      *out = 1;
    #else
      *out = 2;
    #endif
    }'''
    from kosmos.runtime import compile_options, current_target

    backend, arch = current_target()
    assert arch == "sm_90a"
    k = cupy.RawModule(code=src, options=compile_options(backend, arch)).get_function("probe")
    out = cupy.zeros(1, np.int32)
    k((1,), (1,), (out,))
    assert int(out[0]) == 1


def test_occupancy_check_refuses_a_grid_that_cannot_be_resident(world):
    mod = load_module("collectives.hip", world=world)
    k = mod.get_function("kosmos_mover_copy")
    with pytest.raises(kosmos.KosmosResourceError, match="cannot be fully resident"):
        PersistentLaunch.checked(k, 10_000 * sm_count(), 1024)


def test_unmatched_wait_raises_instead_of_hanging(world):
    mod = load_module("collectives.hip", world=world)
    probe = PersistentLaunch.checked(mod.get_function("kosmos_wait_probe"), 1, 32)
    flag = cupy.zeros(1, np.uint64)
    ctx = world.status.wait_ctx(kernel_id("KERNEL_WAIT_PROBE"), budget_s=0.2)
    probe((flag, np.uint64(1), ctx))
    with pytest.raises(kosmos.KosmosTimeoutError) as e:
        world.synchronize()
    assert e.value.kernel == "KERNEL_WAIT_PROBE" and e.value.site == "SITE_PROBE"
    assert e.value.rank == world.rank
    # Every rank's probe timed out; each was either first (its own budget) or stopped by a peer's.
    assert e.value.failed_peer is None or e.value.failed_peer != world.rank
    world.clear_failure()  # collective: the failure words are clear again on every rank
    world.synchronize()


def test_time_calls_times_queued_gpu_work(world):
    """Calls queued behind the stream blocker: device medians per contender and host time per call."""
    from kosmos.timing import time_calls

    a = cupy.ones(1 << 24, np.float32)  # 64 MiB
    t = time_calls(world, {"big": lambda i: a.copy(), "small": lambda i: a[:1024].copy()}, warmup=2, iters=10)
    assert all(v.median_ms > 0 and v.min_ms <= v.median_ms and v.host_us > 0 for v in t.values())
    if not world.oversubscribed:  # ranks sharing a GPU time-slice: their event times mean little
        assert t["big"].median_ms > t["small"].median_ms


def test_time_calls_gives_up_instead_of_hanging(world, monkeypatch):
    """A timed function that synchronizes would wait on the held stream forever: the blocker's
    budget runs out, the calls drain, and the timing is refused with the reason."""
    from kosmos import timing
    from kosmos.errors import KosmosError

    monkeypatch.setattr(timing, "_blocker", timing.StreamBlocker(budget_s=0.5))
    with pytest.raises(KosmosError, match="synchronize"):
        timing.time_calls(world, {"sync": lambda i: cupy.cuda.get_current_stream().synchronize()}, warmup=0, iters=2)
    world.synchronize()


def test_device_record_puts_its_bytes_in_stream_order(world):
    """DeviceRecord: the record's bytes land in its 64-byte aligned slot (TMA maps), ordered on the
    stream after earlier work (the slot is poisoned, behind a 20 ms spin, on the same stream first),
    and a wrong dtype is refused."""
    from kosmos.runtime.records import WORDS, DeviceRecord

    spin = cupy.RawKernel(r"""extern "C" __global__ void spin(long long cycles) {
      long long t0 = clock64(); while (clock64() - t0 < cycles) {} }""", "spin")
    dt = np.dtype([("p", np.uint64), ("n", np.int32), ("f", np.float32), ("w", np.uint64, (29,))])
    rec = DeviceRecord(dt)
    assert rec.slot.data.ptr % 64 == 0
    rng = np.random.default_rng(world.rank)
    stream = cupy.cuda.Stream(non_blocking=True)
    for _ in range(3):
        v = np.zeros((), dt)
        v["p"], v["n"], v["f"] = rng.integers(1, 2**63), rng.integers(-2**31, 2**31), rng.standard_normal()
        v["w"] = rng.integers(0, 2**63, 29, dtype=np.uint64)
        with stream:
            spin((1,), (1,), (np.int64(40_000_000),))  # ~20 ms: a put on another stream would land first
            rec.slot.fill(0xFFFFFFFFFFFFFFFF)
        slot = rec.put(v[()], stream)
        stream.synchronize()
        assert cupy.asnumpy(slot).tobytes() == v.tobytes()
    with pytest.raises(TypeError):
        rec.put(np.zeros((), np.dtype([("p", np.uint64)]))[()])
    with pytest.raises(ValueError):
        DeviceRecord(np.dtype((np.uint8, (8 * WORDS + 8,))))


def test_device_record_repeats_and_captured_puts_leave_the_right_bytes(world):
    """A put of the bytes the slot holds launches nothing; the slot still holds them after any mix of
    repeated and new values, and after a captured put's replay rewrote it behind the record's back
    (from a capture on, every put launches)."""
    from kosmos.runtime.records import DeviceRecord

    dt = np.dtype([("w", np.uint64, (8,))])
    rec = DeviceRecord(dt)
    rng = np.random.default_rng(world.rank + 7)
    a, b = (np.zeros((), dt) for _ in range(2))
    a["w"], b["w"] = (rng.integers(1, 2**63, 8, dtype=np.uint64) for _ in range(2))

    def holds(v):
        cupy.cuda.Device().synchronize()
        return cupy.asnumpy(rec.slot).tobytes() == v.tobytes()

    for v in (a, a, b, b, a, a):
        rec.put(v[()])
        assert holds(v)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        rec.put(b[()], stream)
        graph = stream.end_capture()
    rec.put(a[()], stream)
    stream.synchronize()
    assert holds(a)
    graph.launch(stream)  # the captured put: b
    stream.synchronize()
    assert holds(b)
    rec.put(a[()], stream)  # the record last put a itself, but the replay changed the slot
    stream.synchronize()
    assert holds(a)
