// The Hopper layer's register epilogue walk over a warpgroup's wgmma accumulator fragment:
// which rows and columns each thread holds, handed to an epilogue (epilogue.h) a pair or, for
// kQuadStores epilogues, four n8 blocks of two rows at a time. Its own header so the CPU harness
// (tests/host/epilogue_main.cpp) runs the same walk with a warp's lanes as threads.
#pragma once
#include "epilogue.h"

namespace kosmos {
namespace gemm {

// The register epilogue over one warpgroup's m64nN fragment: thread (warp, lane) holds, for each
// n8 block j, rows warp*16 + lane/4 (+8) and columns 8j + 2*(lane%4) (+1), and the same kN / 2
// columns further (kN / 16 blocks on: the tile's `half`). Unrolled by template recursion: a `#pragma unroll` loop
// stays rolled once the epilogue's body is large (measured with EpiSwiGLUBackward), and a rolled
// loop indexes the accumulators dynamically: they go to the stack and ptxas serializes the wgmma.
// (No generic lambdas here: some NVRTC versions take their call operators for host functions.)
template <int kN, int J = 0, class Epi>
KOSMOS_DEVICE void fragment_pairs(const Epi& epi, const TileCoord& tc, i32 row0, i32 lc0, const float* acc) {
  constexpr int kHi = kN / 16;  // n8 blocks from the lower half to the upper one
  if constexpr (J < kHi) {
    if constexpr (Epi::kQuadStores) {  // four blocks of both rows at once, as 16-byte runs
      static_assert(kHi % 4 == 0, "kQuadStores takes four n8 blocks at a time");
      float lo[2][8], hi[2][8];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          lo[i][2 * b] = acc[4 * (J + b) + 2 * i];
          lo[i][2 * b + 1] = acc[4 * (J + b) + 2 * i + 1];
          hi[i][2 * b] = acc[4 * (J + b + kHi) + 2 * i];
          hi[i][2 * b + 1] = acc[4 * (J + b + kHi) + 2 * i + 1];
        }
      }
      epi.quad(tc, row0, lc0 + 8 * J, lc0 / 2, lo, hi);
      fragment_pairs<kN, J + 4>(epi, tc, row0, lc0, acc);
    } else {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        epi.pair(tc, row0 + 8 * i, lc0 + 8 * J, acc[4 * J + 2 * i], acc[4 * J + 2 * i + 1],
                 acc[4 * (J + kHi) + 2 * i], acc[4 * (J + kHi) + 2 * i + 1]);
      }
      fragment_pairs<kN, J + 1>(epi, tc, row0, lc0, acc);
    }
  }
}

}  // namespace gemm
}  // namespace kosmos
