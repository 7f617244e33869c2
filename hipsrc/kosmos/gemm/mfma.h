// The AMD CDNA3 MFMA layer: v_mfma_f32_32x32x8_bf16 (__builtin_amdgcn_mfma_f32_32x32x8bf16_1k).
// 4 compute waves (of 64) as 2 (rows) x 2 (columns); wave (wm, wn) owns rows wm*64..+64 and two
// 64-column strips, wn*64 (lower half) and 128 + wn*64 (upper half). The MFMA computes the
// transposed block (B rows as its A operand), so each lane holds one output row and runs of 4
// adjacent columns: the (lc, lc+1) pairs epilogue.h wants. 2 x 4 blocks x 16 floats = 128.
// Shared tiles are K-contiguous: sA[128][kLdS], sB[256][kLdS] (bf16).
#pragma once
#include "../platform.h"
#include "schedule.h"

namespace kosmos {
namespace gemm {

typedef short mfma_bf16x4 __attribute__((ext_vector_type(4)));
typedef float mfma_f32x16 __attribute__((ext_vector_type(16)));

struct Mfma {
  static constexpr int kComputeWarps = 4;
  static constexpr int kLdS = kTileK + 8;
  mfma_f32x16 acc[2][4];

  KOSMOS_DEVICE void zero() {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int c = 0; c < 16; ++c) acc[i][j][c] = 0.f;
  }

  KOSMOS_DEVICE static mfma_bf16x4 ld4(const u16* p) {
    const u64 v = *reinterpret_cast<const u64*>(p);
    mfma_bf16x4 r;
    r[0] = short(v & 0xffff);
    r[1] = short((v >> 16) & 0xffff);
    r[2] = short((v >> 32) & 0xffff);
    r[3] = short(v >> 48);
    return r;
  }

  KOSMOS_DEVICE static int ncol(int wn, int nj) { return nj < 2 ? wn * 64 + nj * 32 : kTileN / 2 + wn * 64 + (nj - 2) * 32; }

  KOSMOS_DEVICE void slab(const u16* sA, const u16* sB, int wave, int lane) {
    const int wm = wave / 2, wn = wave % 2, r = lane % 32, kq = (lane / 32) * 4;
#pragma unroll
    for (int k0 = 0; k0 < kTileK; k0 += 8) {
      mfma_bf16x4 a[2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) a[mi] = ld4(sA + (wm * 64 + mi * 32 + r) * kLdS + k0 + kq);
#pragma unroll
      for (int nj = 0; nj < 4; ++nj) {
        const mfma_bf16x4 b = ld4(sB + (ncol(wn, nj) + r) * kLdS + k0 + kq);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
          acc[mi][nj] = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(b, a[mi], acc[mi][nj], 0, 0, 0);
      }
    }
  }

  // Block (mi, nj): lane holds output row mi*32 + lane%32, columns 8*(i/4) + 4*(lane/32) + i%4.
  template <class Epi>
  KOSMOS_DEVICE void epilogue(const TileCoord& tc, const Epi& epi, int wave, int lane) const {
    const int wm = wave / 2, wn = wave % 2;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      const i32 row = tc.row0 + wm * 64 + mi * 32 + lane % 32;
#pragma unroll
      for (int nj = 0; nj < 2; ++nj)
#pragma unroll
        for (int i = 0; i < 16; i += 2) {
          const i32 lc = ncol(wn, nj) + 8 * (i / 4) + 4 * (lane / 32) + (i % 4);
          epi.pair(tc, row, lc, acc[mi][nj][i], acc[mi][nj][i + 1], acc[mi][nj + 2][i], acc[mi][nj + 2][i + 1]);
        }
    }
  }
};

typedef Mfma ArchMma;

}  // namespace gemm
}  // namespace kosmos
