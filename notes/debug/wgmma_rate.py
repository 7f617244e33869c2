"""The wgmma instruction's rate alone, per tile width and B's layout (session 33).

Session 33's 224- and 160-wide tiles ran at ~0.90 / ~0.76 of the 256-wide tile's per-FLOP speed
(TN, many-wave shapes) and ~0.5 / ~0.45 with an MN-major B (NN, NT), where the wave model assumed
~0.985 / ~0.90 (bench/results/s33_b_H100.log). This kernel is the consumers' wgmma loop alone, on
one stage of shared memory that never changes (no loads, no barriers, no epilogue): two consumer
warpgroups a CTA, one CTA an SM, m64nNk16 x 4 a slab, wait<1> between slabs as the builder does.
If N = 224 / 160 issue slower per FLOP than 256 / 192 / 128 here, the instruction is the limit
(odd widths are no use on this GPU); if not, the builder's pipeline around it is.

    python3 notes/debug/wgmma_rate.py
"""
import statistics
import sys
from pathlib import Path

import cupy

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kosmos.runtime.module import current_target  # noqa: E402
from kosmos.runtime.source import compile_options  # noqa: E402

SOURCE = r"""
#include "kosmos/gemm/arch.h"
#include "kosmos/gemm/sm90_wgmma.h"
using namespace kosmos;
using namespace kosmos::gemm;
using namespace kosmos::gemm::sm90;

// A: 128 rows x 64 K (two 8 KB boxes, K-major); B: 256 rows (K-major) or 4 atoms of 64 columns x
// 64 K (MN-major) = 32 KB. Contents: whatever shared memory holds (the rate does not depend on it).
template <int BN, int TB>
__global__ void __launch_bounds__(256, 1) wgmma_rate(int slabs, float* sink) {
  extern __shared__ __align__(1024) unsigned char smem[];
  unsigned char* base = smem + ((1024 - (smem_addr(smem) & 1023)) & 1023);
  const int cw = threadIdx.x / 128;
  const u32 a0 = smem_addr(base + cw * 8192), b0 = smem_addr(base + 16384);
  float acc[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
  for (int s = 0; s < slabs; ++s) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const u64 da = make_desc(a0 + kk * 32, 16, 1024);
      const u64 db = TB ? make_desc(b0 + kk * 2048, 8192, 1024) : make_desc(b0 + kk * 32, 16, 1024);
      wgmma_tile<BN, 0, TB>(acc, da, db, 1u);
    }
    wgmma_commit();
    wgmma_wait<1>();
    fence_regs<BN / 2>(acc);
  }
  wgmma_wait<0>();
  fence_regs<BN / 2>(acc);
  float t = 0.f;
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) t += acc[i];
  if (t == 1234.5f) sink[threadIdx.x] = t;  // keeps the loop
}
"""

WIDTHS = (256, 224, 192, 160, 128)


def main() -> None:
    backend, arch = current_target()
    names = [f"wgmma_rate<{w}, {tb}>" for w in WIDTHS for tb in (0, 1)]
    module = cupy.RawModule(code=SOURCE, options=compile_options(backend, arch), name_expressions=names)
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    sink = cupy.zeros(256, cupy.float32)
    slabs, smem = 4096, 16384 + 32768 + 1024
    kernels = {}
    for n in names:
        k = module.get_function(n)
        k.max_dynamic_shared_size_bytes = smem
        kernels[n] = k
    times = {n: [] for n in names}
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    for rep in range(7):  # interleaved: every kernel once a round
        for n, k in kernels.items():
            start.record()
            k((sms,), (256,), (cupy.int32(slabs), sink), shared_mem=smem)
            stop.record()
            stop.synchronize()
            if rep:  # the first round warms up
                times[n].append(cupy.cuda.get_elapsed_time(start, stop) * 1e-3)
    print(f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}, {sms} CTAs x 2 warpgroups, {slabs} slabs of k64")
    print(f"{'width':>6s} {'B':>8s} {'TF/s':>8s} {'per FLOP vs 256':>16s}")
    best = {}
    for n in names:
        w, tb = (int(v) for v in n[n.index("<") + 1:-1].split(","))
        flops = 2 * 128 * w * 64 * slabs * sms
        tf = flops / statistics.median(times[n]) / 1e12
        best.setdefault(tb, tf if w == 256 else None)
        print(f"{w:6d} {'MN-major' if tb else 'K-major':>8s} {tf:8.1f} {tf / best[tb]:16.3f}")


if __name__ == "__main__":
    main()
