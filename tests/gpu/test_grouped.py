"""GPU tests of kosmos.grouped_matmul (ragged groups, counts in device memory).

Every case checks, per group, against a float64 NumPy product of the same bf16 inputs (relative
Frobenius error, bf16 output 1e-2, fp32 output 1e-4) and bitwise against kosmos.matmul on that
group's rows alone (the same builder and reduction order, so the same bits); outputs start
NaN-poisoned, rows past the counts' sum must stay poisoned, reruns must be bitwise equal.
"""
from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")
ml_dtypes = pytest.importorskip("ml_dtypes")

from kosmos import gemm, grouped  # noqa: E402
from kosmos.moe.reference import swiglu_backward  # noqa: E402

from .test_gemm import BF16, rand_bf16  # noqa: E402

TOL = {"bf16": 1e-2, "f32": 1e-4}


def starts(counts):
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def poisoned(shape, dtype):
    out = cupy.empty(shape, dtype)
    out.view(np.uint8).fill(0xFF)  # NaN in bf16 and fp32
    return out


def bits(x):
    x = cupy.asnumpy(x)
    return x.view(np.uint16 if x.dtype == BF16 else np.uint32)


def ref_group(layout, a, b, lo, hi, e, epilogue="store", pre=None):
    a64 = a[lo:hi].astype(np.float64)
    if layout == "TN":
        y = a64 @ b[e].astype(np.float64).T
        if epilogue == "swiglu":
            f = y.shape[1] // 2
            y = y[:, :f] / (1.0 + np.exp(-y[:, :f])) * y[:, f:]
        return y
    if layout == "NN":
        y = a64 @ b[e].astype(np.float64)
        return swiglu_backward(np, pre[lo:hi].astype(np.float64), y) if epilogue == "swiglu_backward" else y
    return a64.T @ b[lo:hi].astype(np.float64)


def dense_group(layout, a_d, b_d, lo, hi, e, out_dtype, epilogue="store", tile_n=256, gate_up=None):
    """The exact oracle: kosmos.matmul on group e's rows alone, with the same tile width."""
    if layout == "NT":
        return gemm.matmul(a_d[lo:hi], b_d[lo:hi], "NT", out_dtype=out_dtype, tile_n=tile_n)
    return gemm.matmul(a_d[lo:hi], b_d[e], layout, out_dtype=out_dtype, epilogue=epilogue, tile_n=tile_n,
                       gate_up=None if gate_up is None else gate_up[lo:hi])


def run_case(layout, counts, n, k, rows_extra=37, out_kind="bf16", cap=None, epilogue="store", seed=0, tile_n=256):
    rng = np.random.default_rng([seed, len(counts), n, k])
    counts = np.asarray(counts, dtype=np.int32)
    e_count, total = len(counts), int(counts.sum())
    rows = max(1, total + rows_extra)
    if layout == "TN":
        a, b = rand_bf16(rng, (rows, k)), rand_bf16(rng, (e_count, n, k))
    elif layout == "NN":
        a, b = rand_bf16(rng, (rows, n)), rand_bf16(rng, (e_count, n, k))
    else:
        a, b = rand_bf16(rng, (rows, n)), rand_bf16(rng, (rows, k))
    if layout == "NT" and rows > total:
        # Rows past the counts' sum are nobody's: non-finite there must not reach any dW.
        a[total:] = np.inf
        b[total:] = np.nan
    a_d, b_d, c_d = cupy.asarray(a), cupy.asarray(b), cupy.asarray(counts)
    dt = np.dtype(np.float32) if out_kind == "f32" else BF16
    shape = grouped.grouped_shape(layout, a.shape, b.shape, e_count, epilogue)
    # The SwiGLU epilogues' pre-activations: kept by the forward (poisoned first), read by the backward
    pre = rand_bf16(rng, (rows, 2 * shape.no)) if epilogue == "swiglu_backward" else None
    outs, kept = [], []
    for _ in range(2):
        out = poisoned(shape.out_shape, dt)
        gate_up = poisoned((rows, shape.no), BF16) if epilogue == "swiglu" else None if pre is None else cupy.asarray(pre)
        grouped.grouped_matmul(a_d, b_d, c_d, layout, out=out, sm_cap=cap, epilogue=epilogue, gate_up=gate_up,
                               check=True, tile_n=tile_n)
        outs.append(out)
        kept.append(gate_up)
    assert (bits(outs[0]) == bits(outs[1])).all(), "two runs differ"
    if epilogue == "swiglu":
        assert (bits(kept[0]) == bits(kept[1])).all(), "two runs keep different pre-activations"
    width = tile_n or grouped.get_plan(shape, dt, cap).tile_n  # the oracle builds the same tiles
    got = cupy.asnumpy(outs[0])
    st = starts(counts)
    for e in range(e_count):
        lo, hi = int(st[e]), int(st[e + 1])
        part = got[e] if layout == "NT" else got[lo:hi]
        if hi == lo:
            if layout == "NT":
                assert (part.astype(np.float32) == 0).all(), f"group {e} has no rows: dW must be zero"
            continue
        ref = ref_group(layout, a, b, lo, hi, e, epilogue, pre)
        p64 = part.astype(np.float64)
        assert np.isfinite(p64).all(), f"group {e}: NaN/Inf (unwritten, or leaked from another group)"
        err = np.linalg.norm(p64 - ref) / np.linalg.norm(ref)
        assert err < TOL[out_kind], f"group {e} ({hi - lo} rows): rel err {err:.2e}"
        oracle = dense_group(layout, a_d, b_d, lo, hi, e, dt, epilogue, width, kept[0])
        mine = outs[0][e] if layout == "NT" else outs[0][lo:hi]
        assert (bits(oracle) == bits(mine)).all(), f"group {e}: not bitwise equal to kosmos.matmul on its rows"
        if epilogue == "swiglu":  # the kept [gate, up]: what a plain TN GEMM stores, bit for bit
            plain = gemm.matmul(a_d[lo:hi], b_d[e], "TN", tile_n=256)
            assert (bits(plain) == bits(kept[0][lo:hi])).all(), f"group {e}: kept pre-activations differ"
    if layout != "NT":
        assert np.isnan(got[total:].astype(np.float32)).all(), "rows past the counts' sum were written"
    if epilogue == "swiglu":
        assert np.isnan(cupy.asnumpy(kept[0][total:]).astype(np.float32)).all(), "pre-activations past the rows"


# Counts with 0, 1, 127, 128, 129 and a big group; odd N/K multiples of 64.
EDGE = [0, 1, 127, 128, 129, 0, 700, 3]


@pytest.mark.parametrize("layout", ["TN", "NN", "NT"])
def test_edge_counts(layout):
    run_case(layout, EDGE, 320, 192)


@pytest.mark.parametrize("layout", ["TN", "NN", "NT"])
def test_one_group_takes_everything_with_several_tiles_per_cta(layout):
    run_case(layout, [0, 0, 2051, 0], 576, 448, cap=5)


@pytest.mark.parametrize("width", [192, 128])
@pytest.mark.parametrize("layout", ["TN", "NN", "NT"])
def test_narrow_tiles(layout, width):
    if gemm.arch_path() != "wgmma":
        pytest.skip("the narrow tiles are Hopper-only")
    run_case(layout, EDGE, 320, 192, tile_n=width, cap=7)
    run_case(layout, [0, 0, 2051, 0], 576, 448, out_kind="f32" if layout == "NT" else "bf16", tile_n=width)
    if width == 128:  # ping-pong: skewed counts over 5 CTAs, each taking many tiles in turn
        run_case(layout, [900, 3, 0, 64, 65, 1, 0, 300], 256, 1024, tile_n=width, cap=5)


def test_automatic_tile_width():
    """tile_n=None: few tiles pick 128-wide ones on Hopper (8 groups x 128 rows x 512 columns: 16 tiles of 256)."""
    run_case("TN", [128] * 8, 512, 256, rows_extra=0, tile_n=None)
    run_case("TN", [2048] * 8, 1024, 256, rows_extra=0, tile_n=None)  # many tiles: 256 wide


def test_wgrad_fp32_and_ragged_reduction_with_inf_past_the_rows():
    run_case("NT", [65, 0, 300, 1, 63], 384, 256, out_kind="f32", rows_extra=90)


def test_swiglu_forward():
    run_case("TN", [5, 260, 0, 129], 2 * 192, 256, epilogue="swiglu")


def test_swiglu_backward_in_the_dgrad_epilogue():
    """d[gate, up] from dA's accumulators and the kept [gate, up]: odd counts, an empty group, a
    group of several tile rows, F = 192 (not a tile multiple), several tiles per CTA."""
    run_case("NN", [5, 260, 0, 129], 320, 192, epilogue="swiglu_backward")
    run_case("NN", [0, 0, 2051, 0], 576, 448, epilogue="swiglu_backward", cap=5)


def test_many_groups_skewed():
    rng = np.random.default_rng(7)
    counts = rng.integers(0, 40, grouped.max_groups())
    counts[rng.integers(0, len(counts), 200)] = 0  # mostly empty, a few hot
    counts[3] = 1500
    for layout in ("TN", "NT"):
        run_case(layout, counts, 128, 256, cap=11)


def test_bad_counts_are_reported_and_the_plan_recovers():
    rng = np.random.default_rng(3)
    a = cupy.asarray(rand_bf16(rng, (300, 128)))
    w = cupy.asarray(rand_bf16(rng, (3, 256, 128)))
    out = poisoned((300, 256), BF16)
    with pytest.raises(ValueError, match=r"group_rows\[1\] \(-4\) is negative"):
        grouped.grouped_matmul(a, w, cupy.asarray(np.array([10, -4, 5], np.int32)), "TN", out=out, check=True)
    with pytest.raises(ValueError, match="past the rows"):  # an i32 prefix would wrap to 198 <= 300 rows
        grouped.grouped_matmul(a, w, cupy.asarray(np.array([200, 2**31 - 1, 2**31 - 1], np.int32)), "TN",
                               out=out, check=True)
    with pytest.raises(ValueError, match="sum \\(301\\) past the rows"):
        grouped.grouped_matmul(a, w, cupy.asarray(np.array([100, 100, 101], np.int32)), "TN", out=out, check=True)
    assert np.isnan(cupy.asnumpy(out).astype(np.float32)).all(), "bad counts must compute nothing"
    # The same plan (same shapes, so the same queue words) after the failed launches: complete and exact.
    good = np.array([100, 0, 150], np.int32)
    grouped.grouped_matmul(a, w, cupy.asarray(good), "TN", out=out, check=True)
    assert (bits(out[:100]) == bits(gemm.matmul(a[:100], w[0], "TN", tile_n=256))).all()
    assert (bits(out[100:250]) == bits(gemm.matmul(a[100:250], w[2], "TN", tile_n=256))).all()
    assert np.isnan(cupy.asnumpy(out[250:]).astype(np.float32)).all()


@pytest.mark.parametrize("layout", ["TN", "NT"])
def test_a_captured_call_replays_with_new_counts(layout):
    """grouped_matmul captured in a CUDA graph and replayed with new group counts (device values, as
    the MoE routing writes them) and new operands: every replay is the eager call's bits."""
    from kosmos.dtypes import copy_into

    rng = np.random.default_rng(len(layout))
    rows, n, k, e = 1500, 384, 256, 5
    a = cupy.asarray(rand_bf16(rng, (rows, n if layout == "NT" else k)))
    b = cupy.asarray(rand_bf16(rng, (rows, k) if layout == "NT" else (e, n, k)))
    counts = cupy.asarray(np.array([100, 0, 700, 1, 300], np.int32))
    dt = np.dtype(np.float32) if layout == "NT" else BF16
    view = np.uint32 if layout == "NT" else np.uint16
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        out = grouped.grouped_matmul(a, b, counts, layout, out_dtype=dt, sm_cap=9)  # the plan, and a warm-up
        stream.begin_capture()
        grouped.grouped_matmul(a, b, counts, layout, out=out, sm_cap=9)
        graph = stream.end_capture()
        for seed, new_counts in enumerate(([0, 1400, 0, 50, 49], [300, 300, 300, 300, 299], [0, 0, 0, 0, 1])):
            copy_into(counts, cupy.asarray(np.array(new_counts, np.int32)), stream)
            copy_into(a, cupy.asarray(rand_bf16(np.random.default_rng(seed), a.shape)), stream)
            out.view(np.uint8).fill(0xFF)
            graph.launch(stream)
            eager = poisoned(out.shape, dt)
            grouped.grouped_matmul(a, b, counts, layout, out=eager, sm_cap=9)
            stream.synchronize()
            assert (out.view(view) == eager.view(view)).all(), f"replay {seed} differs from the eager call"


def test_portable_mma_sync_path(monkeypatch):
    monkeypatch.setattr(gemm, "_extra_options", ("-DKOSMOS_GEMM_FORCE_PORTABLE",))
    for layout in ("TN", "NN", "NT"):
        run_case(layout, [3, 0, 130, 64], 192, 128)
    run_case("TN", [3, 0, 130, 64], 2 * 192, 128, epilogue="swiglu")
    run_case("NN", [3, 0, 130, 64], 192, 128, epilogue="swiglu_backward")


def test_bad_inputs_rejected():
    rng = np.random.default_rng(1)
    a = cupy.asarray(rand_bf16(rng, (100, 128)))
    w = cupy.asarray(rand_bf16(rng, (2, 256, 128)))
    c = cupy.asarray(np.array([50, 50], np.int32))
    with pytest.raises(ValueError, match="E = 3"):
        grouped.grouped_matmul(a, w, cupy.asarray(np.array([1, 2, 3], np.int32)), "TN")
    with pytest.raises(TypeError, match="int32"):
        grouped.grouped_matmul(a, w, c.astype(cupy.int64), "TN")
    with pytest.raises(TypeError, match="float32 outputs are for the wgrad"):
        grouped.grouped_matmul(a, w, c, "TN", out_dtype=np.float32)
    with pytest.raises(ValueError, match="overlaps"):
        grouped.grouped_matmul(a, w, c, "TN", out=cupy.ndarray((100, 256), BF16, memptr=w.data))
    dy, w2 = cupy.asarray(rand_bf16(rng, (100, 256))), cupy.asarray(rand_bf16(rng, (2, 256, 128)))
    with pytest.raises(ValueError, match="needs gate_up"):
        grouped.grouped_matmul(dy, w2, c, "NN", epilogue="swiglu_backward")
    with pytest.raises(ValueError, match=r"gate_up must be \[100, 256\]"):
        grouped.grouped_matmul(dy, w2, c, "NN", epilogue="swiglu_backward", gate_up=dy[:, :128].copy())
    with pytest.raises(ValueError, match="gate_up is for the SwiGLU"):
        grouped.grouped_matmul(a, w, c, "TN", gate_up=cupy.empty((100, 256), BF16))
    with pytest.raises(ValueError, match="gate_up overlaps"):
        grouped.grouped_matmul(a, w, c, "TN", epilogue="swiglu", gate_up=cupy.ndarray((100, 256), BF16, memptr=w.data))


def test_runs_arrived_gates_each_group_by_row_range():
    """The MoE readiness hook (RunsArrived): each group is a few runs of rows (one per source rank in
    the MoE arena) released by another stream after the launch; a tile starts exactly when the runs
    its rows overlap have arrived: not before (nothing else completes while we wait), and not later
    (the tiles of each released range complete while the rest still wait)."""
    import time

    from kosmos.runtime import DeviceStatus, PersistentLaunch, kernel_id

    from .test_gemm import side_stream

    counts = np.array([300, 0, 129, 517], dtype=np.int32)
    run_rows = np.array([[100, 200, 0], [0, 0, 0], [129, 0, 0], [200, 0, 317]], dtype=np.int32)
    assert (run_rows.sum(1) == counts).all()
    n, k, runs = 512, 384, run_rows.shape[1]
    tn = n // 256
    rng = np.random.default_rng(11)
    total = int(counts.sum())
    a, b = rand_bf16(rng, (total + 19, k)), rand_bf16(rng, (len(counts), n, k))
    a_d, b_d, c_d = cupy.asarray(a), cupy.asarray(b), cupy.asarray(counts)
    shape = grouped.grouped_shape("TN", a.shape, b.shape, len(counts))
    plan = grouped.get_plan(shape, BF16, 64, tile_n=256)  # 64 CTAs: SMs stay free for the copies
    launch = PersistentLaunch.checked(grouped._module().get_function("kosmos_grouped_tn_bf16_gated"), plan.grid,
                                      gemm.block_threads(), gemm.shared_mem_bytes())
    out = poisoned(shape.out_shape, BF16)
    arrived = cupy.zeros(run_rows.size, dtype=cupy.uint64)
    done = cupy.zeros(1, dtype=cupy.uint64)
    rr = cupy.asarray(run_rows)
    side = side_stream()
    seven = cupy.cuda.alloc_pinned_memory(8)
    np.frombuffer(seven, dtype=np.uint64, count=1)[0] = 7
    status = DeviceStatus(rank=0, budget_s=20.0)
    cupy.cuda.Device().synchronize()
    main = cupy.cuda.Stream(non_blocking=True)

    def release(e, s):  # a host-to-device copy: no kernel may be loaded while the gated grid runs
        cupy.cuda.runtime.memcpyAsync(arrived.data.ptr + 8 * (e * runs + s), seven.ptr, 8,
                                      cupy.cuda.runtime.memcpyHostToDevice, side.ptr)

    def settles_at(tile_rows):  # done reaches tile_rows * tn and stays there
        deadline = time.monotonic() + 5.0
        while int(done.get(stream=side)[0]) < tile_rows * tn and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(0.05)
        return int(done.get(stream=side)[0])

    s0 = starts(counts)
    try:
        launch(plan.args(a_d, b_d, c_d, out) + (rr, np.int32(runs), arrived, np.uint64(7),
                                                 status.wait_ctx(kernel_id("KERNEL_GEMM")), done), stream=main)
        assert settles_at(0) == 0, "tiles completed before any run arrived"
        release(3, 2)  # group 3 rows [200, 517): tile rows 2-4 only (rows 128-255 need run 0 too)
        assert settles_at(3) == 3 * tn
        partial = cupy.asnumpy(out.get(stream=side)).astype(np.float32)
        assert np.isnan(partial[s0[3]:s0[3] + 256]).all() and np.isfinite(partial[s0[3] + 256:s0[4]]).all()
        release(3, 0)  # the rest of group 3: its 5 tile rows
        assert settles_at(5) == 5 * tn
        release(0, 0)  # group 0's first tile row spans runs 0 and 1: still waiting
        assert settles_at(5) == 5 * tn
        release(0, 1)
        assert settles_at(8) == 8 * tn
        release(2, 0)  # group 1 is empty: never waited for
        main.synchronize()
        status.raise_if_failed()
    finally:
        for e in range(len(counts)):
            for s in range(runs):
                release(e, s)  # a failed assertion must not leave the grid waiting out its budget
        side.synchronize()
        main.synchronize()
        status.free()
    assert int(done.get()[0]) == 10 * tn
    got = cupy.asnumpy(out).astype(np.float64)
    ungated = grouped.grouped_matmul(a_d, b_d, c_d, "TN", tile_n=256)
    # the hook changes when a tile runs, never its bits (rows past the counts: never written)
    assert (bits(out)[:total] == bits(ungated)[:total]).all()
    for e in range(len(counts)):
        lo, hi = int(s0[e]), int(s0[e + 1])
        if hi > lo:
            ref = ref_group("TN", a, b, lo, hi, e)
            assert np.linalg.norm(got[lo:hi] - ref) / np.linalg.norm(ref) < TOL["bf16"], e
    assert np.isnan(got[total:]).all()


def test_a_repeated_call_reads_its_new_counts(monkeypatch):
    """The cached path (kosmos.runtime.call_cache) keeps the plan and argument records of the
    same arrays, never the counts: a second call with other counts in the same device array
    launches without planning again and computes them, bitwise as a checked call (check=True
    never takes the cache) does."""
    rng = np.random.default_rng(92)
    e, k, n = 3, 128, 256
    x = cupy.asarray(rand_bf16(rng, (500, k)))
    w = cupy.asarray(rand_bf16(rng, (e, n, k)))
    rows = cupy.asarray(np.array([200, 0, 300], np.int32))
    out = poisoned((500, n), BF16)
    grouped.grouped_matmul(x, w, rows, "TN", out=out)
    rows[:] = cupy.asarray(np.array([17, 400, 83], np.int32))
    real_get_plan = grouped.get_plan

    def no_planning(*args, **kwargs):
        raise AssertionError("a repeated call planned again")

    monkeypatch.setattr(grouped, "get_plan", no_planning)
    got = bits(grouped.grouped_matmul(x, w, rows, "TN", out=out))
    monkeypatch.setattr(grouped, "get_plan", real_get_plan)
    want = bits(grouped.grouped_matmul(x, w, rows, "TN", out=poisoned((500, n), BF16), check=True))
    assert (got == want).all()
    with pytest.raises(TypeError):  # the counts' address and shape, another dtype
        grouped.grouped_matmul(x, w, rows.view(cupy.float32), "TN", out=out)
