// MXFP8 dequantization to bf16 (what the sm_90a MXFP8 path feeds the bf16 mainloop): an E4M3
// element times its block's E8M0 scale 2^(s - 127), rounded once to bf16 (nearest even), built from
// the bits with integer operations only. A float multiply would not do: CuPy compiles every
// module with flush-to-zero, and the products reach bf16's subnormals (down to 2^-136).
// Exact wherever bf16 holds the product (it holds every E4M3 mantissa; only magnitudes past
// bf16's range overflow to Inf, and those under 2^-130 lose low bits). NaN element or NaN scale:
// NaN. The same as kosmos.mx.dequantize(t).astype(bfloat16), bit for bit (tests/test_mx.py).
#pragma once
#include "../platform.h"

namespace kosmos {
namespace mx {

KOSMOS_DEVICE u16 e4m3_to_bf16_scaled(u8 code, u8 scale) {
  const u16 sign = u16(code & 0x80u) << 8;
  const u32 e = (code >> 3) & 0xFu, m = code & 7u;
  if (scale == 0xFFu || (code & 0x7Fu) == 0x7Fu) return u16(sign | 0x7FC0u);
  if (e == 0 && m == 0) return sign;  // +-0 at any scale
  // the element as M * 2^x, M in [8, 16)
  u32 big;
  i32 x;
  if (e == 0) {  // subnormal: m * 2^-9, normalised so that bit 3 leads
    const i32 lead = m >= 4 ? 2 : (m >= 2 ? 1 : 0);
    big = m << (3 - lead);
    x = -9 - (3 - lead);
  } else {
    big = 8u + m;
    x = i32(e) - 7 - 3;
  }
  x += i32(scale) - 127;
  const i32 biased = x + 3 + 127;  // the value is (M / 8) * 2^(x + 3)
  if (biased >= 255) return u16(sign | 0x7F80u);  // past bf16's range: Inf
  if (biased >= 1) return u16(sign | (u32(biased) << 7) | ((big - 8u) << 4));
  // bf16 subnormal: mant * 2^-133, mant = M * 2^(x + 133), rounded to nearest even (a carry into
  // 128 is the smallest normal, which the same bits encode)
  const i32 s = x + 133;
  if (s >= 0) return u16(sign | (big << s));  // s <= 3 here, M << 3 < 128
  if (s < -5) return sign;                      // under half of 2^-133: zero
  const i32 r = -s;
  const u32 q = big >> r, rem = big & ((1u << r) - 1u), half = 1u << (r - 1);
  const u32 mant = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
  return u16(sign | mant);
}

}  // namespace mx
}  // namespace kosmos
