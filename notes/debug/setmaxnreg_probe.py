"""Does the builder's register trade hang by itself? (notes/moe.md, session 11: the open hang.)

One persistent kernel per case, 132 CTAs of 384 threads (the builder's shape), each CTA repeating
the builder's trade `iters` times: producer warpgroup .dec<40>, thread 0 works (or meets the
"stop" at once), barrier 4, .inc<168>; consumer warpgroups .inc<232>, work, barrier 2/3,
.dec<168>; __syncthreads; then a "mover" phase that keeps registers busy at 168. Every thread
carries a value across all trades and checks it after each one (a register the compiler assumed
would survive the trade but did not: counted in bad[]). A watchdog reads each CTA's progress from
a side stream; a stuck CTA is reported with the place its threads last passed.

    python3 notes/debug/setmaxnreg_probe.py [iters]      (H200; seconds per case)

Cases: mend (consumers bar.arrive 4/384 after .inc, producer bar.sync 4/384: the builder since
638ffa9) or not (producer-only barrier 4/128: the builder before); producer work: none (the stop
at once), short or random; a trade in every iteration, or every other one (a call without a
trade between, as MoEForward's plan 2).
"""
import os
import sys
import time

import cupy
import numpy as np

SRC = r"""
template <int N> __device__ __forceinline__ void inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N)); }
template <int N> __device__ __forceinline__ void dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N)); }
__device__ __forceinline__ void bar_sync(int id, int n) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void bar_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ unsigned hash(unsigned x) { x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; return x ^ (x >> 16); }
__device__ __forceinline__ void spin(unsigned n) { const long long t0 = clock64(); while (clock64() - t0 < n) {} }

// mode bits: 1 mend; 2 producer works (else the stop at once); 4 random work lengths;
// 8 trade every other iteration only; 16 consumers work
extern "C" __global__ void __launch_bounds__(384, 1)
probe(int iters, int mode, volatile unsigned* progress, unsigned* where, unsigned* bad, float* sink) {
  const int wg = threadIdx.x / 128;
  const unsigned mine = hash(threadIdx.x * 1315423911u + blockIdx.x);  // carried across every trade
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = float(mine % (i + 3));
  unsigned* w = where + (blockIdx.x * 384 + threadIdx.x);
  for (int it = 0; it < iters; ++it) {
    const bool trade = !(mode & 8) || (it & 1);
    const unsigned r = hash(it * 2654435761u + blockIdx.x);
    __syncwarp();
    *w = 1u | (unsigned(it) << 4);
    if (wg == 0) {
      if (trade) dec<40>();
      *w = 2u | (unsigned(it) << 4);
      if (threadIdx.x == 0 && (mode & 2)) spin((mode & 4) ? r % 4000 : 500);
      __syncwarp();
      *w = 3u | (unsigned(it) << 4);
      bar_sync(4, (mode & 1) ? 384 : 128);
      *w = 4u | (unsigned(it) << 4);
      if (trade) inc<168>();
    } else {
      if (trade) inc<232>();
      *w = 5u | (unsigned(it) << 4);
      if (mode & 1) bar_arrive(4, 384);
      if (mode & 16) spin((mode & 4) ? (r >> 8) % 4000 : 500);
      // some work in the consumer registers
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[i] = acc[i] * 1.0001f + float(i);
      __syncwarp();
      *w = 6u | (unsigned(it) << 4);
      bar_sync(2 + (wg - 1), 128);
      *w = 7u | (unsigned(it) << 4);
      if (trade) dec<168>();
    }
    *w = 8u | (unsigned(it) << 4);
    __syncthreads();
    if (mine != hash(threadIdx.x * 1315423911u + blockIdx.x)) atomicAdd(bad, 1u);
    // the "mover" phase: every warp at 168 registers
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] += __shfl_xor_sync(0xffffffffu, acc[(i + 1) % 64], 1);
    if (threadIdx.x == 0) progress[blockIdx.x] = unsigned(it + 1);
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 64; ++i) s += acc[i];
  sink[blockIdx.x * 384 + threadIdx.x] = s;
}
"""

PLACES = {1: "entry", 2: "producer after .dec", 3: "producer before barrier 4", 4: "producer before .inc",
          5: "consumer after .inc", 6: "consumer before exit barrier", 7: "consumer before .dec",
          8: "after the trade (__syncthreads)"}


def run_case(kernel, iters: int, mode: int, watch_s: float = 10.0) -> str:
    grid = 132
    progress = cupy.zeros(grid, np.uint32)
    where = cupy.zeros(grid * 384, np.uint32)
    bad = cupy.zeros(1, np.uint32)
    sink = cupy.empty(grid * 384, np.float32)
    cupy.cuda.Device().synchronize()
    kernel((grid,), (384,), (np.int32(iters), np.int32(mode), progress, where, bad, sink))
    ev = cupy.cuda.Event()
    ev.record()
    t0 = time.time()
    side = cupy.cuda.Stream(non_blocking=True)
    while not ev.done:
        if time.time() - t0 > watch_s:
            with side:
                p, wh = progress.get(stream=side), where.get(stream=side).reshape(grid, 384)
            side.synchronize()
            stuck = [b for b in range(grid) if p[b] < iters]
            lines = [f"HANG after {watch_s:.0f} s: {len(stuck)} CTAs short of {iters}"]
            for b in stuck[:4]:
                places = {}
                for t in range(0, 384, 32):  # lane 0 of each warp
                    v = int(wh[b, t])
                    places.setdefault((PLACES.get(v & 15, v & 15), v >> 4), []).append(t // 32)
                lines.append(f"  cta {b} at iteration {p[b]}: " +
                             "; ".join(f"warps {ws} {pl} (it {i})" for (pl, i), ws in places.items()))
            return "\n".join(lines)
        time.sleep(0.01)
    return f"clean, {iters} trades x {grid} CTAs in {time.time() - t0:.2f} s, register values lost: {int(bad.get()[0])}"


def main() -> None:
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
    mod = cupy.RawModule(code=SRC, options=("-arch=sm_90a",))
    kernel = mod.get_function("probe")
    cases = {"no mend, stop at once": 0, "no mend, random producer work": 2 | 4,
             "no mend, stop at once, consumers work": 16 | 4, "mend, stop at once": 1,
             "mend, random producer work": 1 | 2 | 4, "mend, stop at once, consumers work": 1 | 16 | 4,
             "mend, trade every other iteration": 1 | 8, "no mend, trade every other iteration": 8}
    only = os.environ.get("CASES")
    for name, mode in cases.items():
        if only and name not in only.split(","):
            continue
        result = run_case(kernel, iters, mode)
        print(f"{name:42s} {result}", flush=True)
        if result.startswith("HANG"):
            os._exit(3)  # the hung kernel holds the stream: no later case could run
    os._exit(0)  # a hung kernel would keep the process from exiting


if __name__ == "__main__":
    main()
