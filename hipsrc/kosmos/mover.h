// Mover copy loops: a whole CTA moves a contiguous byte range with 16-byte accesses and
// several requests in flight per thread (the loads of one round are issued before its stores).
#pragma once
#include "cta.h"

namespace kosmos {

constexpr int kMoverUnroll = 4;

// dst and src 16-byte aligned, nbytes a multiple of 16. Either side may be peer memory.
// The first `threads` threads of the CTA copy (fewer than blockDim.x: the warps-per-mover ablation).
KOSMOS_DEVICE void cta_copy(void* dst, const void* src, u64 nbytes, u32 threads) {
  if (threadIdx.x >= threads) return;
  vec16* d = reinterpret_cast<vec16*>(dst);
  const vec16* s = reinterpret_cast<const vec16*>(src);
  const u64 n = nbytes / 16, stride = threads;
  u64 i = threadIdx.x;
  for (; i + (kMoverUnroll - 1) * stride < n; i += kMoverUnroll * stride) {
    vec16 v[kMoverUnroll];
#pragma unroll
    for (int u = 0; u < kMoverUnroll; ++u) v[u] = ld16(s + i + u * stride);
#pragma unroll
    for (int u = 0; u < kMoverUnroll; ++u) st16(d + i + u * stride, v[u]);
  }
  for (; i < n; i += stride) st16(d + i, ld16(s + i));
}

// Gathered (or scattered) rows: row r of `rows` goes from src(r) to dst(r), both 16-byte aligned,
// row_bytes a multiple of 16, rows * row_bytes / 16 < 2^31 (32-bit indices that must not wrap). The CTA works over all the rows' vectors
// at once, so that rows shorter than a round (an MoE token row: 7-14 KB against the 24 KB a CTA
// keeps in flight) still give every thread kMoverUnroll requests in flight.
// Unroll: vectors in flight per thread (more where the registers are there anyway: a CTA of a
// fused kernel has the builder's register budget). xform(r, v) may change each vector of row r
// between its load and its store (the MoE backward weights its dY rows there).
struct KeepVectors {
  KOSMOS_DEVICE void operator()(u32, vec16&) const {}
};
template <class Xform>
constexpr bool kKeepsVectors = false;
template <>
constexpr bool kKeepsVectors<KeepVectors> = true;

template <int Unroll = kMoverUnroll, class Dst, class Src, class Xform = KeepVectors>
KOSMOS_DEVICE void cta_copy_rows(const Dst& dst, const Src& src, u32 rows, u32 row_bytes, const Xform& xform = Xform{}) {
  const u32 vecs = row_bytes / 16, n = rows * vecs, stride = blockDim.x;
  for (u32 i = threadIdx.x; i < n; i += Unroll * stride) {
    vec16 v[Unroll];
#pragma unroll
    for (int u = 0; u < Unroll; ++u) {
      const u32 f = i + u * stride;
      if (f < n) v[u] = ld16(static_cast<const u8*>(src(f / vecs)) + u64(f % vecs) * 16);
    }
#pragma unroll
    for (int u = 0; u < Unroll; ++u) {
      const u32 f = i + u * stride;
      if (f < n) {
        xform(f / vecs, v[u]);
        st16(static_cast<u8*>(dst(f / vecs)) + u64(f % vecs) * 16, v[u]);
      }
    }
  }
}

// One row by a group of threads, thread `first` of `stride` (a warp's lanes: the MoE side
// pushes, at the producer's registers: no per-vector row arithmetic). xform(0, v) as above.
template <int Unroll, class Xform = KeepVectors>
KOSMOS_DEVICE void group_copy_row(u8* dst, const u8* src, u32 row_bytes, u32 first, u32 stride,
                                  const Xform& xform = Xform{}) {
  const u32 n = row_bytes / 16;
  for (u32 i = first; i < n; i += Unroll * stride) {
    vec16 v[Unroll];
#pragma unroll
    for (int u = 0; u < Unroll; ++u)
      if (i + u * stride < n) v[u] = ld16(src + u64(i + u * stride) * 16);
#pragma unroll
    for (int u = 0; u < Unroll; ++u)
      if (i + u * stride < n) {
        xform(0, v[u]);
        st16(dst + u64(i + u * stride) * 16, v[u]);
      }
  }
}

// The same, spread over the whole grid (CTA-major), for staging a rank's input.
KOSMOS_DEVICE void grid_copy(void* dst, const void* src, u64 nbytes) {
  const u64 per_cta = (nbytes / 16 + gridDim.x - 1) / gridDim.x * 16;
  const u64 begin = per_cta * blockIdx.x;
  if (begin >= nbytes) return;
  const u64 len = begin + per_cta > nbytes ? nbytes - begin : per_cta;
  cta_copy(static_cast<u8*>(dst) + begin, static_cast<const u8*>(src) + begin, len, blockDim.x);
}

}  // namespace kosmos
