// CDNA4 (gfx950: MI350X / MI355X) block-scaled MFMA on MXFP8 operands:
// v_mfma_scale_f32_32x32x64_f8f6f4, E4M3 x E4M3 with one E8M0 scale per lane (per 32 elements).
//
// Fragment layout (assumed from AMD's descriptions of the f8f6f4 family, NOT yet run on hardware:
// tests/gpu/test_mx.py::test_scaled_mfma_gemm checks it on a gfx950): lane l of a wave holds row
// l % 32 of a 32 x 64 operand and its 32 elements k = 32 * (l / 32) ... + 31 -- exactly one MX
// block, so the lane's scale is that block's E8M0 (in byte 0 of the scale register, op_sel 0).
// The result is the same 32 x 32 layout as every 32x32 MFMA: lane l holds column l % 32 and rows
// 8 * (c / 4) + 4 * (l / 32) + c % 4 of accumulator c (the bf16 layer's, gemm/mfma.h).
#pragma once
#include "../platform.h"

#if KOSMOS_AMD && defined(__gfx950__)
#define KOSMOS_MX_SCALED_MFMA 1
#else
#define KOSMOS_MX_SCALED_MFMA 0
#endif

namespace kosmos {
namespace mx {

#if KOSMOS_MX_SCALED_MFMA
typedef int mx_i32x8 __attribute__((ext_vector_type(8)));
typedef float mx_f32x16 __attribute__((ext_vector_type(16)));

struct MxFrag {
  mx_i32x8 codes;
  int scale;  // E8M0 in byte 0; the hardware reads a VGPR (LLVM keeps it out of SGPRs/inline constants)
};

// Row `row` (of `rows`; past them: zeros at scale 2^0) of a row-blocked MXFP8 matrix with `k`
// columns, the lane's block of the 64 columns from k0.
KOSMOS_DEVICE MxFrag load_frag(const u8* data, const u8* scales, i64 rows, i64 k, i64 row, i64 k0, int lane) {
  MxFrag f;
  const i64 col = k0 + 32 * (lane / 32);
  if (row < rows) {
    const vec16 lo = ld16(data + row * k + col), hi = ld16(data + row * k + col + 16);
    f.codes = mx_i32x8{int(lo.x), int(lo.y), int(lo.z), int(lo.w), int(hi.x), int(hi.y), int(hi.z), int(hi.w)};
    f.scale = scales[row * (k / 32) + col / 32];
  } else {
    f.codes = mx_i32x8{0, 0, 0, 0, 0, 0, 0, 0};
    f.scale = 127;
  }
  return f;
}

// acc[i][j] += sum_k first[i][k] 2^s * second[j][k] 2^s' over the fragments' 64 columns (both
// operand formats E4M3: format code 0).
KOSMOS_DEVICE mx_f32x16 mfma_scale(const MxFrag& first, const MxFrag& second, mx_f32x16 acc) {
  return __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(first.codes, second.codes, acc, 0, 0, 0, first.scale, 0,
                                                          second.scale);
}
#endif

}  // namespace mx
}  // namespace kosmos
