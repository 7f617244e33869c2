// The mma.sync layer (NVIDIA sm_80+ other than Hopper's wgmma path): m16n8k16 bf16 -> fp32.
// 8 compute warps as 2 (rows) x 4 (columns); warp (wm, wn) owns rows wm*64..+64 and two 32-column
// strips, wn*32 (lower half) and 128 + wn*32 (upper half), so each thread holds every column's
// gate/up partner (see epilogue.h). 4 x 8 mma blocks x 4 floats = 128 accumulators per thread.
// Shared tiles are K-contiguous: sA[128][kLdS], sB[256][kLdS] (bf16), padded against bank conflicts.
#pragma once
#include "../platform.h"
#include "schedule.h"

namespace kosmos {
namespace gemm {

struct MmaSync {
  static constexpr int kComputeWarps = 8;
  static constexpr int kLdS = kTileK + 8;
  float acc[4][8][4];

  KOSMOS_DEVICE void zero() {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.f;
  }

  KOSMOS_DEVICE static u32 ld32(const u16* p) { return *reinterpret_cast<const u32*>(p); }

  // One kTileK-deep slab from shared memory.
  KOSMOS_DEVICE void slab(const u16* sA, const u16* sB, int warp, int lane) {
    const int wm = warp / 4, wn = warp % 4, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int k0 = 0; k0 < kTileK; k0 += 16) {
      u32 a[4][4];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        const u16* pa = sA + (wm * 64 + mi * 16 + g) * kLdS + k0 + 2 * t;
        a[mi][0] = ld32(pa);
        a[mi][1] = ld32(pa + 8 * kLdS);
        a[mi][2] = ld32(pa + 8);
        a[mi][3] = ld32(pa + 8 * kLdS + 8);
      }
#pragma unroll
      for (int nj = 0; nj < 8; ++nj) {
        const int n = (nj < 4 ? wn * 32 + nj * 8 : kTileN / 2 + wn * 32 + (nj - 4) * 8) + g;
        const u16* pb = sB + n * kLdS + k0 + 2 * t;
        const u32 b0 = ld32(pb), b1 = ld32(pb + 8);
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
          float* c = acc[mi][nj];
          asm volatile(
              "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
              "{%0,%1,%2,%3};"
              : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
              : "r"(a[mi][0]), "r"(a[mi][1]), "r"(a[mi][2]), "r"(a[mi][3]), "r"(b0), "r"(b1));
        }
      }
    }
  }

  template <class Epi>
  KOSMOS_DEVICE void epilogue(const TileCoord& tc, const Epi& epi, int warp, int lane) const {
    const int wm = warp / 4, wn = warp % 4, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
      for (int nj = 0; nj < 4; ++nj)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const i32 row = tc.row0 + wm * 64 + mi * 16 + g + 8 * i;
          const i32 lc = wn * 32 + nj * 8 + 2 * t;
          epi.pair(tc, row, lc, acc[mi][nj][2 * i], acc[mi][nj][2 * i + 1], acc[mi][nj + 4][2 * i],
                   acc[mi][nj + 4][2 * i + 1]);
        }
  }
};

typedef MmaSync ArchMma;

}  // namespace gemm
}  // namespace kosmos
