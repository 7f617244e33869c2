// Steps all threads of a CTA take together: a value broadcast from thread 0, and prefix sums of
// integers (the MoE plan's tables: integer sums are order-free, so the values are a serial loop's).
#pragma once
#include "platform.h"

namespace kosmos {

// Broadcast a value chosen by thread 0 to the whole CTA.
template <class T>
KOSMOS_DEVICE T cta_broadcast(T* slot, T value) {
  if (threadIdx.x == 0) *slot = value;
  __syncthreads();
  T v = *slot;
  __syncthreads();
  return v;
}

// The most warps a CTA calling cta_inclusive_sum may have (its shared words: one a warp).
constexpr int kScanWarps = 16;

// The sum of v over threads 0..threadIdx.x, on every thread (blockDim.x a multiple of the warp
// size, at most kScanWarps warps): a shuffle scan in each warp, then the warps before it.
KOSMOS_DEVICE i32 cta_inclusive_sum(i32 v) {
  __shared__ i32 warp_total[kScanWarps];
  const int lane = int(threadIdx.x) % kWarpSize, warp = int(threadIdx.x) / kWarpSize;
  for (int d = 1; d < kWarpSize; d <<= 1) {
    const i32 u = i32(shfl_up_u32(u32(v), d));
    if (lane >= d) v += u;
  }
  if (lane == kWarpSize - 1) warp_total[warp] = v;
  __syncthreads();
  for (int w = 0; w < warp; ++w) v += warp_total[w];
  __syncthreads();  // warp_total is free for the next call
  return v;
}

// a[0, n) (shared memory, written before a __syncthreads) replaced by its inclusive prefix sums;
// all threads, each over a run of ceil(n / blockDim.x) elements. Ends with a __syncthreads.
KOSMOS_DEVICE void cta_inclusive_scan(i32* a, i32 n) {
  const i32 per = (n + i32(blockDim.x) - 1) / i32(blockDim.x);
  const i32 lo = min(i32(threadIdx.x) * per, n), hi = min(lo + per, n);
  i32 mine = 0;
  for (i32 i = lo; i < hi; ++i) mine += a[i];
  i32 run = cta_inclusive_sum(mine) - mine;
  for (i32 i = lo; i < hi; ++i) {
    run += a[i];
    a[i] = run;
  }
  __syncthreads();
}

}  // namespace kosmos
