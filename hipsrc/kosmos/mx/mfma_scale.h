// CDNA4 (gfx950: MI350X / MI355X) block-scaled MFMA on MXFP8 operands:
// v_mfma_scale_f32_32x32x64_f8f6f4, E4M3 x E4M3 with one E8M0 scale per lane (per 32 elements).
//
// Fragment layout for FP8 operands (NOT yet run on hardware: tests/gpu/test_mx.py::
// test_scaled_mfma_gemm checks it on a gfx950). Lane l of a wave holds row l % 32 of a 32 x 64
// operand (B: column l % 32), g = l / 32, in two 16-byte halves: dwords 0-3 hold k = 16 g ... +15,
// dwords 4-7 hold k = 32 + 16 g ... +15 (FP4 would pack 32 contiguous values instead). The lane's
// scale (byte 0 of its scale register, op_sel 0) is the E8M0 of row l % 32's K block g, and the
// hardware applies it to dwords 0-3 (g = 0) or 4-7 (g = 1) of both lanes l % 32 and l % 32 + 32 --
// that is, to block g, k in [32 g, 32 g + 32). Source: AMD's composable_kernel mx_mfma_op test
// (its FP8 register tables and the committed hardware scale probe scale_mapping_32x32x64.txt) and
// Triton's AMD scaled-MFMA lowering ("2 16-consecutive elements blocks" for FP8/FP6). (An earlier
// version of this header loaded 32 contiguous k per lane: right for FP4, wrong for FP8.)
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
// columns: the lane's two 16-element halves of the 64 columns from k0 (see the layout above) and
// the scale of K block k0 / 32 + lane / 32.
KOSMOS_DEVICE MxFrag load_frag(const u8* data, const u8* scales, i64 rows, i64 k, i64 row, i64 k0, int lane) {
  MxFrag f;
  const i64 g = lane / 32, col = k0 + 16 * g;
  if (row < rows) {
    const vec16 lo = ld16(data + row * k + col), hi = ld16(data + row * k + col + 32);
    f.codes = mx_i32x8{int(lo.x), int(lo.y), int(lo.z), int(lo.w), int(hi.x), int(hi.y), int(hi.z), int(hi.w)};
    f.scale = scales[row * (k / 32) + k0 / 32 + g];
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
