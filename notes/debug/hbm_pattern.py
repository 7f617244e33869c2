"""What HBM gives the small-M grouped GEMMs' weight stream on this GPU, against a plain stream.

Session 28 (notes/moe.md): at 256 rows per expert the grouped GEMMs read every expert's weights
once from HBM at ~2.2 TB/s (66 % of an H100's peak by ncu), every CTA reading 128-byte pieces of
its 192-256 weight rows (4 KB apart) at the same K offset as every other CTA. Is that order what
caps them? One kernel (a template on the mode) reads the same ~800 MB of 4 KB rows five ways, 132
CTAs x 384 threads, every round 16 loads of 16 B a thread issued before any is used (96 KB a CTA
in flight; the GEMM's ring holds up to 160-200 KB):
  stream      a block's bytes in address order (whole rows, one after the other)
  lock128     one 128 B piece of each of 768 rows a round, piece s = 0..31 in turn, every CTA at
              the same s (the GEMM's order: a slab of its weight rows at a time)
  lock256     256 B of each of 384 rows a round (the TMA maps' L2 promotion: a 128-byte miss
              fetches 256 B)
  rot256      lock256 with each CTA starting at its own piece ((7 * cta) % 16)
  lock512     512 B of each of 192 rows a round (what two slabs issued together would read)
Every mode has the same bytes in flight; the lock modes differ only in the run length per row.
Median of 15 timings of 3 back-to-back launches each (events), the modes interleaved; GB/s =
bytes read / time. Plain loads, not TMA: a model of the access order, not of the GEMM.

    python3 notes/debug/hbm_pattern.py
"""
import statistics

import cupy
import numpy as np

SOURCE = r"""
template <int MODE>
__global__ void __launch_bounds__(384, 1) read_pattern(const uint4* __restrict__ buf, long long rows,
                                                       unsigned int* sink) {
  constexpr int kRowVecs = 256;  // 4 KB rows
  constexpr int kPiece = MODE == 1 ? 8 : MODE == 4 ? 32 : 16;  // vectors of a row a round
  constexpr int kPieces = kRowVecs / kPiece;
  constexpr int kRound = 16 * 384;  // vectors a round: 16 a thread
  constexpr int kBlockRows = MODE == 0 ? 192 : kRound / kPiece;  // lock: one piece of every row a round
  const long long blocks = rows / kBlockRows;
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (long long blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
    const uint4* base = buf + blk * kBlockRows * kRowVecs;
    const int rot = MODE == 3 ? (7 * int(blockIdx.x)) % kPieces : 0;
#pragma unroll 1
    for (int p = 0; p < (MODE == 0 ? kBlockRows * kRowVecs / kRound : kPieces); ++p) {
      uint4 x[16];
#pragma unroll
      for (int u = 0; u < 16; ++u) {
        const int c = u * 384 + int(threadIdx.x);
        if (MODE == 0) {
          x[u] = base[p * kRound + c];
        } else {
          const int s = (p + rot) % kPieces;
          x[u] = base[(c / kPiece) * kRowVecs + s * kPiece + c % kPiece];
        }
      }
#pragma unroll
      for (int u = 0; u < 16; ++u) { acc.x ^= x[u].x; acc.y ^= x[u].y; acc.z ^= x[u].z; acc.w ^= x[u].w; }
    }
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x9E3779B9u) atomicAdd(sink, 1u);
}
"""

MODES = ("stream", "lock128", "lock256", "rot256", "lock512")
BACK_TO_BACK = 3


def main() -> None:
    names = [f"read_pattern<{m}>" for m in range(len(MODES))]
    module = cupy.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=names)
    kernels = [module.get_function(n) for n in names]
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    ctas = props["multiProcessorCount"]
    rows = ctas * 2 * 768  # whole blocks of every mode, the same count on every CTA
    nbytes = rows * 4096
    buf = cupy.random.randint(0, 2**31, size=nbytes // 4, dtype=cupy.int32)
    sink = cupy.zeros(1, cupy.uint32)
    times = {m: [] for m in MODES}
    for it in range(17):
        for kernel, m in zip(kernels, MODES):
            a, b = cupy.cuda.Event(), cupy.cuda.Event()
            a.record()
            for _ in range(BACK_TO_BACK):
                kernel((ctas,), (384,), (buf, np.int64(rows), sink))
            b.record()
            b.synchronize()
            if it >= 2:
                times[m].append(cupy.cuda.get_elapsed_time(a, b) / BACK_TO_BACK)
    print(f"{props['name'].decode()}, {ctas} CTAs x 384 threads, {nbytes / 2**20:.0f} MiB of 4 KB rows, "
          f"96 KB a CTA in flight a round")
    for m in MODES:
        t = statistics.median(times[m])
        print(f"  {m:8s} {t:7.3f} ms  {nbytes / t / 1e6:7.0f} GB/s")


if __name__ == "__main__":
    main()
