// MXFP8 quantization (OCP MX v1.0, E4M3 elements, one E8M0 scale per 32): the rule of kosmos/mx.py,
// bit for bit (tests/test_mx.py runs these functions on the CPU against it).
//   scale 2^k, k = floor(log2 amax) - 8, clamped to [-127, 127] (a zero block: -127);
//   elements v * 2^-k rounded to nearest even in E4M3, saturating at +-448;
//   a block with a NaN or an Inf: scale 0xFF (NaN) and every element 0x7F (NaN).
// Exact in fp32 (2^-k is a power of two; v * 2^-k < 512), also where the compiler flushes fp32
// subnormals to zero (CuPy compiles every module with -ftz=true on CUDA and its flush option on HIP):
// bf16 subnormals are fp32 subnormals, so they are scaled from their bits, never through a multiply.
#pragma once
#include "../platform.h"

namespace kosmos {
namespace mx {

constexpr int kBlock = 32;
constexpr int kEmaxE4M3 = 8;
constexpr u8 kScaleNaN = 0xFF, kElementNaN = 0x7F;

KOSMOS_DEVICE bool finite_f32(float v) { return (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u; }

// One finite value to E4M3 (fn), round to nearest even, saturating.
KOSMOS_DEVICE u8 f32_to_e4m3_sat(float v) {
  const u8 sign = u8((__float_as_uint(v) >> 24) & 0x80u);
  const float a = fabsf(v);
  if (a >= 448.0f) return sign | 0x7E;
  if (a < 0.015625f) return sign | u8(rintf(a * 512.0f));  // subnormals, steps of 2^-9 (8 -> 2^-6: 0x08)
  int e;
  const float f = frexpf(a, &e);  // a = f * 2^e, f in [0.5, 1): a = (1 + m / 8) * 2^(e - 1)
  int m = int(rintf((2.0f * f - 1.0f) * 8.0f)), x = e - 1;
  if (m == 8) {
    m = 0;
    ++x;
  }
  return sign | u8(((x + 7) << 3) | m);
}

// v * 2^-k exactly, for any finite v, with or without flush-to-zero. A subnormal v is its integer
// mantissa times 2^-149; its scaled value is that integer times 2^(-149 - k), normal for the k it can
// meet at the bottom (k = -127: 2^-22). Where 2^(-149 - k) itself is subnormal (k > -23) it flushes,
// but then |v * 2^-k| < 2^-103, far below half of E4M3's smallest step (2^-10): zero either way.
KOSMOS_DEVICE float scale_pow2(float v, int k) {
  const unsigned bits = __float_as_uint(v);
  if ((bits & 0x7f800000u) != 0) return v * ldexpf(1.0f, -k);  // k <= 119 for finite fp32: 2^-k normal
  const float r = float(int(bits & 0x007fffffu)) * ldexpf(1.0f, -149 - k);
  return (bits >> 31) ? -r : r;
}

// The block's scale exponent from its largest magnitude (a flushed subnormal amax gives the same
// -127 as an exact one: floor(log2) of any subnormal is below -126).
KOSMOS_DEVICE int scale_exponent(float amax) {
  if (amax == 0.0f) return -127;
  int e;
  frexpf(amax, &e);  // floor(log2 amax) = e - 1, subnormals included
  const int k = e - 1 - kEmaxE4M3;
  return k < -127 ? -127 : (k > 127 ? 127 : k);
}

// Two finite values, already scaled, to E4M3 codes (a's in bits 0-7): one instruction where the
// hardware converts E4M3 (platform.h; nearest even, saturating at +-448: the rule above), else
// f32_to_e4m3_sat.
KOSMOS_DEVICE u32 f32x2_to_e4m3x2_sat(float a, float b) {
#if KOSMOS_HW_E4M3
  return hw_f32x2_to_e4m3x2_sat(a, b);
#else
  return u32(f32_to_e4m3_sat(a)) | (u32(f32_to_e4m3_sat(b)) << 8);
#endif
}

// Quantize the block v(0) ... v(31) into codes (element i in byte i % 4 of word i / 4); returns
// its E8M0 scale.
template <class Load>
KOSMOS_DEVICE u8 quantize_block_packed(const Load& v, u32 (&codes)[8]) {
  float amax = 0.0f;
  bool finite = true;
#pragma unroll
  for (int i = 0; i < kBlock; ++i) {
    const float x = v(i);
    finite = finite && finite_f32(x);
    amax = fmaxf(amax, fabsf(x));
  }
  if (!finite) {
#pragma unroll
    for (int j = 0; j < 8; ++j) codes[j] = 0x7F7F7F7Fu;  // kElementNaN x 4
    return kScaleNaN;
  }
  const int k = scale_exponent(amax);
#pragma unroll
  for (int j = 0; j < 8; ++j)
    codes[j] = f32x2_to_e4m3x2_sat(scale_pow2(v(4 * j), k), scale_pow2(v(4 * j + 1), k)) |
               (f32x2_to_e4m3x2_sat(scale_pow2(v(4 * j + 2), k), scale_pow2(v(4 * j + 3), k)) << 16);
  return u8(k + 127);
}

// The same, the codes stored at out[0], out[out_stride], ...
template <class Load>
KOSMOS_DEVICE u8 quantize_block(const Load& v, u8* out, i64 out_stride) {
  u32 codes[8];
  const u8 scale = quantize_block_packed(v, codes);
  for (int i = 0; i < kBlock; ++i) out[i * out_stride] = u8(codes[i / 4] >> (8 * (i % 4)));
  return scale;
}

}  // namespace mx
}  // namespace kosmos
