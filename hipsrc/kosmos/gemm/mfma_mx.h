// The gfx950 (CDNA4) layer of MXFP8 x MXFP8 tiles (TileConfig::kMxB): the Mfma layer's waves and
// accumulators (gemm/mfma.h: 4 waves as 2 x 2, each 2 x 4 blocks of 32 x 32), but each block's
// slab is one v_mfma_scale_f32_32x32x64_f8f6f4 on E4M3 codes with both operands' E8M0 scales
// applied by the MFMA (kosmos/mx/mfma_scale.h: its lane layout). Shared tiles hold a slab's codes
// K-contiguous, sA[128][kLdS] and sB[256][kLdS] bytes, and each row's two scales (blocks k0 / 32
// and k0 / 32 + 1) in sAs[128][2], sBs[256][2]. Off gfx950 the slab traps: the host runs these
// tiles only where kosmos.mx.scaled_mfma_available().
#pragma once
#include "../mx/mfma_scale.h"
#include "mfma.h"

namespace kosmos {
namespace gemm {

struct MfmaMx : Mfma {
  static constexpr int kLdS = kTileK + 16;  // bytes a row: 16-byte loads, rows offset by 16 B
  static constexpr int kScalesPerRow = kTileK / 32;

#if KOSMOS_MX_SCALED_MFMA
  // Lane l's fragment of shared row `row`: codes k 16 g .. +15 and 32 + 16 g .. +15, g = l / 32,
  // and the scale of block g (mfma_scale.h).
  KOSMOS_DEVICE static mx::MxFrag frag(const u8* s, const u8* scales, int row, int lane) {
    const int g = lane / 32;
    const vec16 lo = *reinterpret_cast<const vec16*>(s + row * kLdS + 16 * g);
    const vec16 hi = *reinterpret_cast<const vec16*>(s + row * kLdS + 32 + 16 * g);
    mx::MxFrag f;
    f.codes = mx::mx_i32x8{int(lo.x), int(lo.y), int(lo.z), int(lo.w), int(hi.x), int(hi.y), int(hi.z), int(hi.w)};
    f.scale = scales[row * kScalesPerRow + g];
    return f;
  }
#endif

  KOSMOS_DEVICE void slab_mx(const u8* sA, const u8* sAs, const u8* sB, const u8* sBs, int wave, int lane) {
#if KOSMOS_MX_SCALED_MFMA
    const int wm = wave / 2, wn = wave % 2, r = lane % 32;
    mx::MxFrag a[2];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) a[mi] = frag(sA, sAs, wm * 64 + mi * 32 + r, lane);
#pragma unroll
    for (int nj = 0; nj < 4; ++nj) {
      const mx::MxFrag b = frag(sB, sBs, ncol(wn, nj) + r, lane);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) acc[mi][nj] = mx::mfma_scale(b, a[mi], acc[mi][nj]);  // B first, as Mfma
    }
#else
    __builtin_trap();
#endif
  }
};

}  // namespace gemm
}  // namespace kosmos
