"""Any GPU array through every op family: inputs and outputs given as a bare CUDA Array Interface or
a DLPack capsule give the same bits as CuPy arrays (the exact oracle: the same op on the same operands).

"cai_late" hands the op a CAI whose data lands on a non-blocking side stream ~0.1 s after the call is
issued; the CAI names that stream, and the op must wait for it (without the wait it reads the NaN poison).
"""
from __future__ import annotations

import numpy as np
import pytest
from producers import cai_of, dlpack_of

import kosmos
from kosmos.collectives import AllToAll
from kosmos.dtypes import bfloat16, float32
from kosmos.tp.layers import ColumnParallelLinear
from kosmos.tp.ops import AllGatherMatmul, MatmulReduceScatter

from .conftest import cupy, poisoned
from .test_tp import arr, bits

_SPIN = cupy.RawKernel(r"""
extern "C" __global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}""", "spin")

_side_streams: list = []  # kept alive until the test's GPU work is done


def late(a):
    """A CAI of a copy of `a` that a non-blocking side stream writes after spinning ~0.1 s."""
    s = cupy.cuda.Stream(non_blocking=True)
    buf = poisoned(a.shape, a.dtype)
    cupy.cuda.Device().synchronize()  # the poison is in place before the side stream starts
    with s:
        _SPIN((1,), (1,), (np.int64(200_000_000),))
        buf.data.copy_from_device_async(a.data, a.nbytes, s)
    _side_streams.append(s)
    return cai_of(buf, stream=s.ptr)


WRAPS = {"cai": cai_of, "dlpack": dlpack_of, "cai_late": late}


def dev(tag, rank, shape, scale=1.0):
    return cupy.asarray(arr(tag, rank, shape, scale))


@pytest.mark.parametrize("how", WRAPS)
@pytest.mark.parametrize("layout", ["TN", "NT"])
def test_matmul(world, how, layout):
    a = dev(("ia", layout), world.rank, (384, 256))
    b = dev(("ib", layout), world.rank, (192, 256) if layout == "TN" else (384, 320), 0.1)
    want = kosmos.matmul(a, b, layout)
    out = poisoned(want.shape, bfloat16)
    got = kosmos.matmul(WRAPS[how](a), WRAPS[how](b), layout, out=WRAPS["dlpack" if how == "dlpack" else "cai"](out))
    world.synchronize()
    assert isinstance(got, cupy.ndarray) and got.data.ptr == out.data.ptr  # the result is written into `out`
    np.testing.assert_array_equal(bits(out), bits(want))


def test_dlpack_producer_gets_our_stream_and_shares_its_memory(world):
    a, b = dev("sa", world.rank, (128, 128)), dev("sb", world.rank, (128, 128))
    pa = dlpack_of(a)
    assert kosmos.arrays.as_cupy(pa).data.ptr == a.data.ptr  # zero-copy
    kosmos.matmul(pa, b, "TN")
    assert pa.streams[-1] == 1  # CuPy's current stream is the legacy default: DLPack's stream 1
    s = cupy.cuda.Stream(non_blocking=True)
    pb = dlpack_of(b)
    kosmos.matmul(a, pb, "TN", stream=s)
    assert pb.streams == [s.ptr]  # the op's stream, not the current one
    s.synchronize()
    world.synchronize()


@pytest.mark.parametrize("how", WRAPS)
def test_collectives(world, how):
    P, r = world.size, world.rank
    x = dev("cx", r, (P * 48, 264))
    np.testing.assert_array_equal(bits(kosmos.all_gather(world, WRAPS[how](x))), bits(kosmos.all_gather(world, x)))
    y = cupy.asarray(arr("cy", r, (P * 40, 128)).astype(float32))
    want = kosmos.reduce_scatter(world, y)
    got = kosmos.reduce_scatter(world, WRAPS[how](y))
    np.testing.assert_array_equal(cupy.asnumpy(got).view(np.uint32), cupy.asnumpy(want).view(np.uint32))
    counts = np.random.default_rng(11).integers(1, 9, (P, P))
    z = dev("cz", r, (int(counts[r].sum()), 64))
    a2a = AllToAll(world, 256, (64,), bfloat16)
    want, _ = a2a(z, counts[r])
    got, _ = a2a(WRAPS[how](z), counts[r])
    world.synchronize()
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("how", WRAPS)
def test_fused_all_gather_and_reduce_scatter(world, how):
    P, r = world.size, world.rank
    m, n, k = 128, 192, 256
    x, w = dev("fx", r, (m, k)), dev("fw", 0, (n, k), 0.1)
    ag = AllGatherMatmul(world, m, n, k)
    want = bits(ag(x, w))
    out = poisoned(ag.out_shape, bfloat16)
    kept = poisoned(ag.gathered_shape, bfloat16)
    out_wrap = dlpack_of if how == "dlpack" else cai_of
    ag(WRAPS[how](x), WRAPS[how](w), out_wrap(out), gathered=out_wrap(kept))
    world.synchronize()
    np.testing.assert_array_equal(bits(out), want)
    np.testing.assert_array_equal(bits(kept), bits(kosmos.all_gather(world, x)))
    xr, wr = dev("rx", r, (P * m, k)), dev("rw", r, (n, k), 0.1)
    rs = MatmulReduceScatter(world, m, n, k)
    want = bits(rs(xr, wr))
    got = rs(WRAPS[how](xr), WRAPS[how](wr))
    world.synchronize()
    np.testing.assert_array_equal(bits(got), want)


def test_layer_takes_foreign_arrays(world):
    P, r = world.size, world.rank
    layer = ColumnParallelLinear(world, 256, 128 * P, seed=3)
    x = dev("lx", r, (128, 256))
    want = bits(layer.forward(x))
    layer2 = ColumnParallelLinear(world, 256, 128 * P, weight=dlpack_of(layer.weight))
    got = layer2.forward(cai_of(x))
    world.synchronize()
    np.testing.assert_array_equal(bits(got), want)
