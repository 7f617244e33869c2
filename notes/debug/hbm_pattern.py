"""What HBM gives the small-M grouped GEMMs' weight stream on this GPU, against a plain stream.

Session 28 (notes/moe.md): at 256 rows per expert the grouped GEMMs read every expert's weights
once from HBM at ~2.2 TB/s (66 % of an H100's peak by ncu), every CTA reading 128-byte pieces of
its 192-256 weight rows (4 KB apart) at the same K offset as every other CTA. Is that pattern what
caps them? One kernel reads the same ~520 MB of 4 KB rows four ways, 132 CTAs x 384 threads, each
CTA owning blocks of 192 rows (a 192-wide tile's weight rows), 16 loads of 16 B a thread in flight
(96 KB a CTA, the ring holds up to 160 KB):
  stream      each block's bytes in address order (whole rows, one after the other)
  lock128     a block's rows 128 B at a time (slab s of every row, s = 0..31), every CTA at the same s
  lock256     the same 256 B at a time (the TMA maps' L2 promotion: a 128-byte miss fetches 256 B)
  rot256      lock256 with each CTA starting at its own slab ((7 * cta) % 16)
  lock512     lock256 with 512 B pieces (what a 128-deep stage, or two slabs issued together, reads)
Median of 20 launches each (events), interleaved; GB/s = bytes read / time. Plain loads, not TMA:
a model of the access order, not of the GEMM.

    python3 notes/debug/hbm_pattern.py
"""
import statistics

import cupy
import numpy as np

SOURCE = r"""
extern "C" __global__ void __launch_bounds__(384) read_pattern(const uint4* __restrict__ buf, long long blocks,
                                                               int mode, unsigned int* sink) {
  const int row_vecs = 256;                  // 4 KB rows
  const int block_rows = 192;
  const int piece = mode == 1 ? 8 : mode == 4 ? 32 : 16;  // vectors of a row read at once (128, 256, 512 B)
  const int pieces = row_vecs / piece;
  const int chunks = block_rows * piece;     // vectors of one piece of every row of the block
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (long long blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
    const uint4* base = buf + blk * block_rows * row_vecs;
    if (mode == 0) {
      for (int v0 = 0; v0 < block_rows * row_vecs; v0 += 16 * 384) {
        uint4 x[16];
#pragma unroll
        for (int u = 0; u < 16; ++u) x[u] = base[v0 + u * 384 + threadIdx.x];
#pragma unroll
        for (int u = 0; u < 16; ++u) { acc.x ^= x[u].x; acc.y ^= x[u].y; acc.z ^= x[u].z; acc.w ^= x[u].w; }
      }
      continue;
    }
    const int rot = mode == 3 ? (7 * int(blockIdx.x)) % pieces : 0;
    // 16 loads a thread: lock128 takes 4 pieces (4 x 1,536 chunks / 384), lock256 2, lock512 1
    const int per = 16 * 384 / chunks;
    for (int p0 = 0; p0 < pieces; p0 += per) {
      uint4 x[16];
#pragma unroll
      for (int u = 0; u < 16; ++u) {
        const int c = u * 384 + int(threadIdx.x);       // chunk of this round
        const int s = (p0 + c / chunks + rot) % pieces;  // its piece
        const int r = (c % chunks) / piece, v = (c % chunks) % piece;
        x[u] = base[r * row_vecs + s * piece + v];
      }
#pragma unroll
      for (int u = 0; u < 16; ++u) { acc.x ^= x[u].x; acc.y ^= x[u].y; acc.z ^= x[u].z; acc.w ^= x[u].w; }
    }
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x9E3779B9u) atomicAdd(sink, 1u);
}
"""

MODES = ("stream", "lock128", "lock256", "rot256", "lock512")


def main() -> None:
    kernel = cupy.RawKernel(SOURCE, "read_pattern")
    ctas = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["multiProcessorCount"]
    blocks = ctas * 5
    nbytes = blocks * 192 * 4096
    buf = cupy.random.randint(0, 2**31, size=nbytes // 4, dtype=cupy.int32)
    sink = cupy.zeros(1, cupy.uint32)
    name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()
    times = {m: [] for m in MODES}
    for it in range(23):
        for mode, m in enumerate(MODES):
            a, b = cupy.cuda.Event(), cupy.cuda.Event()
            a.record()
            kernel((ctas,), (384,), (buf, np.int64(blocks), np.int32(mode), sink))
            b.record()
            b.synchronize()
            if it >= 3:
                times[m].append(cupy.cuda.get_elapsed_time(a, b))
    print(f"{name}, {ctas} CTAs x 384 threads, {nbytes / 2**20:.0f} MiB of 4 KB rows, blocks of 192 rows")
    for m in MODES:
        t = statistics.median(times[m])
        print(f"  {m:8s} {t:7.3f} ms  {nbytes / t / 1e6:7.0f} GB/s")


if __name__ == "__main__":
    main()
