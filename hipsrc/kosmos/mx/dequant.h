// MXFP8 dequantization to bf16 (what the sm_90a MXFP8 path feeds the bf16 mainloop): an E4M3
// element times its block's E8M0 scale 2^(s - 127), rounded once to bf16 (nearest even), built from
// the bits with integer operations only. A float multiply would not do: CuPy compiles every
// module with flush-to-zero, and the products reach bf16's subnormals (down to 2^-136).
// Exact wherever bf16 holds the product (it holds every E4M3 mantissa; only magnitudes past
// bf16's range overflow to Inf, and those under 2^-130 lose low bits). NaN element or NaN scale:
// NaN. The same as kosmos.mx.dequantize(t).astype(bfloat16), bit for bit (tests/test_mx.py).
//
// Below it, the vector forms the movers and the dequantize kernel use (16 elements per thread):
// on NVIDIA sm_89+ and (for ordinary scales) gfx950 the hardware conversions, bit for bit the same
// function except for NaN payloads (both give a NaN; tests/gpu/test_mx.py runs all 65,536 (code,
// scale) pairs through them).
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

// E8M0 scale code -> 2^(s - 127) as f32 bits, built without a float operation (2^-127 is an f32
// subnormal, which a flush-to-zero multiply would lose); the NaN code gives NaN.
KOSMOS_DEVICE float e8m0_to_f32(u32 s) {
  return __uint_as_float(s == 0u ? 0x00400000u : (s == 0xFFu ? 0x7FC00000u : s << 23));
}

// Two codes (the first in bits 0-7) and their scales -> a bf16 pair (the first in the low half).
// Where the hardware converts E4M3 (platform.h, KOSMOS_HW_E4M3): E4M3 -> f16 (exact: every E4M3
// value is an f16 normal or zero) -> f32 (exact) -> times 2^k (exact: the product's lowest bit is
// >= 2^-139, inside f32's subnormal grid) -> bf16, one round-to-nearest-even, nothing flushed.
// NaN code or NaN scale: NaN (0 x NaN too); past bf16's range: Inf, as the integer form.
// On gfx950 (platform.h, KOSMOS_HW_E4M3_SCALED_BF16) one instruction a pair where both scale codes
// are in [kHwScaleMin, kHwScaleMax]: there every nonzero product is a bf16 normal -- at least
// 2^-9 x 2^(10 - 127) = 2^-126, at most 448 x 2^(246 - 127) < 2^128 -- so exact with no rounding,
// flush or saturation to trust; practical blocks (maxima 2^-117 .. 2^119) all fall inside.
constexpr u32 kHwScaleMin = 10, kHwScaleMax = 246;
KOSMOS_DEVICE u32 e4m3x2_to_bf16x2_scaled(u32 codes2, u32 s0, u32 s1) {
#if KOSMOS_HW_E4M3
  return hw_e4m3x2_to_bf16x2_scaled(codes2, e8m0_to_f32(s0), e8m0_to_f32(s1));
#else
#if KOSMOS_HW_E4M3_SCALED_BF16
  if (s0 - kHwScaleMin <= kHwScaleMax - kHwScaleMin && s1 - kHwScaleMin <= kHwScaleMax - kHwScaleMin) {
    const u32 lo = hw_e4m3x2_to_bf16x2_times(codes2, e8m0_to_f32(s0));
    return s0 == s1 ? lo : (lo & 0xFFFFu) | (hw_e4m3x2_to_bf16x2_times(codes2, e8m0_to_f32(s1)) & 0xFFFF0000u);
  }
#endif
  return u32(e4m3_to_bf16_scaled(u8(codes2), u8(s0))) | (u32(e4m3_to_bf16_scaled(u8(codes2 >> 8), u8(s1))) << 16);
#endif
}

// ---- in registers, for the mainloop (Hopper: bf16x2 multiplies are sm_90 instructions) ----
// Four E4M3 codes (one u32, code i in bits 8i..8i+7) of one block times its scale, as two bf16
// pairs (codes 0,1 -> lo; 2,3 -> hi), the same bits as e4m3_to_bf16_scaled for every non-NaN code.
// Integer moves and two bf16x2 multiplies, no conversion instruction (Hopper issues those at a
// fraction of the ALU rate): a code's sign, exponent and mantissa shifted into a bf16's low bits
// read as the E4M3 value times 2^-120 (subnormals included), so x 2^120 (exact: every E4M3 value
// is a bf16 normal) then x 2^k (one round to nearest even; bf16 subnormals kept: these PTX
// multiplies have no flush-to-zero) is the dequantized value. `scale2`: bf16x2 of 2^k in both halves
// (e8m0_to_bf16x2); below it, the one-multiply form for scales up to 2^7. A NaN code (S.1111.111)
// reads as a finite value here: the caller watches for NaN codes with e4m3x4_nan_seen (the
// mainloop makes a row that had one NaN: mx_nan_rows).
#if KOSMOS_SM90
KOSMOS_DEVICE u32 e8m0_to_bf16x2(u32 s) {
  const u32 h = s == 0u ? 0x0040u : (s == 0xFFu ? 0x7FC0u : s << 7);  // 2^-127 is a bf16 subnormal
  return h | (h << 16);
}
KOSMOS_DEVICE u32 bf16x2_mul(u32 a, u32 b) {  // (no flush-to-zero, whatever -ftz says)
  u32 d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
// The codes moved into bf16 bit positions, read as value x 2^-120 (lo: codes 0, 1; hi: 2, 3).
// Two integer-pipe instructions a pair: prmt's sign-replicating selector puts each code in the low
// byte of its half and the code's sign over the high byte ([S..S][code]); << 4 (an integer
// multiply: the FMA pipe) moves the code to bits 4..11 and a sign copy to bit 15; the mask keeps
// the sign and the 7 magnitude bits (what spills from the low half into the high one is masked).
KOSMOS_DEVICE void e4m3x4_shifted(u32 codes4, u32& lo, u32& hi) {
  u32 a, b;
  asm("prmt.b32 %0, %1, 0, 0x9180;" : "=r"(a) : "r"(codes4));  // [S1 c1 S0 c0]
  asm("prmt.b32 %0, %1, 0, 0xB3A2;" : "=r"(b) : "r"(codes4));  // [S3 c3 S2 c2]
  lo = (a * 16u) & 0x87F087F0u;
  hi = (b * 16u) & 0x87F087F0u;
}
KOSMOS_DEVICE void e4m3x4_to_bf16x4_scaled(u32 codes4, u32 scale2, u32& lo, u32& hi) {
  u32 a, b;
  e4m3x4_shifted(codes4, a, b);
  lo = bf16x2_mul(bf16x2_mul(a, 0x7B807B80u), scale2);  // x 2^120 (exact), then x 2^k
  hi = bf16x2_mul(bf16x2_mul(b, 0x7B807B80u), scale2);
}

// Scale codes up to kOneMultiplyMaxScale (2^7: block maxima under 2^16, every weight and nearly
// every activation) take one multiply instead of two: 2^120 x 2^(s - 127) = 2^(s - 7) is then a
// bf16 normal, and value x 2^-120 times it rounds once to the same bits as the two steps (whose
// first is exact). e8m0_one_multiply_bf16x2: that factor in both halves, (s + 120) << 7, one IMAD.
constexpr u32 kOneMultiplyMaxScale = 134;
KOSMOS_DEVICE u32 e8m0_one_multiply_bf16x2(u32 s) { return s * 0x00800080u + 0x3C003C00u; }
KOSMOS_DEVICE void e4m3x4_to_bf16x4_one_multiply(u32 codes4, u32 factor2, u32& lo, u32& hi) {
  u32 a, b;
  e4m3x4_shifted(codes4, a, b);
  lo = bf16x2_mul(a, factor2);
  hi = bf16x2_mul(b, factor2);
}
#endif  // KOSMOS_SM90
// An AND-accumulator of e4m3x4_nan_seen over many words keeps every bit 7 set unless some code was
// a NaN: (code | 0x80) + 1 carries out of the byte only for magnitude 0x7F (a carry into the next
// byte can clear its bit 7 too: a false alarm only in a word that has a NaN anyway).
KOSMOS_DEVICE u32 e4m3x4_nan_seen(u32 codes4) { return (codes4 | 0x80808080u) + 0x01010101u; }
KOSMOS_DEVICE bool e4m3_nan_in(u32 seen_and) { return (seen_and & 0x80808080u) != 0x80808080u; }

KOSMOS_DEVICE u32 byte_of(const vec16& v, int i) { return ((&v.x)[i / 4] >> (8 * (i % 4))) & 0xFFu; }

// Where an MXFP8 matrix keeps its scales: one per 32 elements of a row (kRowBlocks: scales
// [rows, cols / 32]) or of a column (kColBlocks: [rows / 32, cols]). kNone: not MXFP8.
enum Blocks : int { kNone = 0, kRowBlocks = 1, kColBlocks = 2 };

// 16 consecutive codes of one row (the 16 bytes at data + r * cols + c, c a multiple of 16) and
// their scales: one code for row blocks (in scales.x: the 16 share a block), 16 for column blocks.
struct Codes16 {
  vec16 codes, scales;
};
template <int B>
KOSMOS_DEVICE Codes16 load_codes16(const u8* data, const u8* scales, u64 r, u32 c, u32 cols) {
  Codes16 v;
  v.codes = ld16(data + r * cols + c);
  if constexpr (B == kRowBlocks) v.scales.x = scales[r * (cols / 32) + c / 32];
  else v.scales = ld16(scales + (r / 32) * cols + c);
  return v;
}

// ... and their 16 bf16 values stored at dst (32 bytes, 16-byte aligned).
KOSMOS_DEVICE void store_bf16x16(u16* dst, const Codes16& v, int blocks) {
  u32 w[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const u32 pair = ((&v.codes.x)[j / 2] >> (16 * (j % 2))) & 0xFFFFu;
    const u32 s0 = blocks == kRowBlocks ? v.scales.x : byte_of(v.scales, 2 * j);
    const u32 s1 = blocks == kRowBlocks ? v.scales.x : byte_of(v.scales, 2 * j + 1);
    w[j] = e4m3x2_to_bf16x2_scaled(pair, s0, s1);
  }
  st16(dst, vec16{w[0], w[1], w[2], w[3]});
  st16(dst + 8, vec16{w[4], w[5], w[6], w[7]});
}

// Rows [row0, row0 + rows) of an MXFP8 matrix [.., cols] (data and scales at the matrix's first
// row; cols a multiple of 32) into bf16 rows at dst (the range's first row), row by row, by the
// CTA's first `threads` threads (only they call), Unroll vectors in flight per thread; each vector
// loads its own scales (column blocks: a band's 32 rows read its scales 32 times, which L1 / L2
// serve for a local matrix).
template <int B, int Unroll>
KOSMOS_DEVICE void cta_dequant_by_row(u16* dst, const u8* data, const u8* scales, u64 row0, u32 rows, u32 cols,
                                      u32 threads) {
  const u32 per_row = cols / 16, n = rows * per_row;
  for (u32 i = threadIdx.x; i < n; i += Unroll * threads) {
    Codes16 v[Unroll];
#pragma unroll
    for (int u = 0; u < Unroll; ++u) {
      const u32 f = i + u * threads;
      if (f < n) v[u] = load_codes16<B>(data, scales, row0 + f / per_row, (f % per_row) * 16, cols);
    }
#pragma unroll
    for (int u = 0; u < Unroll; ++u) {
      const u32 f = i + u * threads;
      if (f < n) store_bf16x16(dst + u64(f / per_row) * cols + (f % per_row) * 16, v[u], B);
    }
  }
}

// The same for column blocks by bands: a thread takes one 16-column vector of a 32-row band -- the
// band's rows inside [row0, end) -- and loads its 16 scales once for all of them, so each scale
// crosses a link once (row by row, a pull from a peer moved as many scale bytes as codes wherever
// L1 missed: ~2 bytes an element, not 33/32; the codes streaming through L1 evict the scales).
// A short range (an item's last rows) whose bands leave threads idle splits each band's rows into
// up to 8 slices, a unit each (its scales read once a slice). Only the first `threads` call.
template <int Unroll>
KOSMOS_DEVICE void cta_dequant_col_bands(u16* dst, const u8* data, const u8* scales, u64 row0, u32 rows, u32 cols,
                                         u32 threads) {
  const u32 per_row = cols / 16;
  const u64 end = row0 + rows, band0 = row0 / 32;
  const u32 bands = u32((end + 31) / 32 - band0);
  u32 sh = 0;  // 2^sh slices a band (shifts, not divisions: a u64 division is a ~70-instruction call)
  while (sh < 3 && (2u << sh) * bands * per_row <= threads) ++sh;
  for (u32 t = threadIdx.x; t < (bands * per_row) << sh; t += threads) {
    const u32 q = t / per_row, slice = q & ((1u << sh) - 1), c = (t - q * per_row) * 16;
    const u64 band = band0 + (q >> sh);
    const u64 b_lo = band * 32 > row0 ? band * 32 : row0, b_hi = band * 32 + 32 < end ? band * 32 + 32 : end;
    const u32 n = u32(b_hi - b_lo);
    const u64 lo = b_lo + ((n * slice) >> sh), hi = b_lo + ((n * (slice + 1)) >> sh);
    if (lo == hi) continue;
    const vec16 s = ld16(scales + band * cols + c);
    for (u64 r = lo; r < hi; r += Unroll) {
      vec16 v[Unroll];
#pragma unroll
      for (int u = 0; u < Unroll; ++u)
        if (r + u < hi) v[u] = ld16(data + (r + u) * cols + c);
#pragma unroll
      for (int u = 0; u < Unroll; ++u)
        if (r + u < hi) store_bf16x16(dst + (r + u - row0) * cols + c, Codes16{v[u], s}, kColBlocks);
    }
  }
}

// A mover's pull (either side may be peer memory): rows [row0, row0 + rows) as cta_dequant_by_row
// does them, column blocks by bands (each scale read once). Only the pulls take the bands: on the
// dequantize kernel's local matrices the band loop was 15-35 % slower than row by row (H100,
// notes/mxfp8.md session 43), L1 and L2 serving the scales' re-reads there.
template <int Unroll = 4>
KOSMOS_DEVICE void cta_dequant_rows(u16* dst, const u8* data, const u8* scales, u64 row0, u32 rows, u32 cols,
                                    int blocks, u32 threads) {
  if (threadIdx.x >= threads) return;
  if (blocks == kColBlocks) cta_dequant_col_bands<Unroll>(dst, data, scales, row0, rows, cols, threads);
  else cta_dequant_by_row<kRowBlocks, Unroll>(dst, data, scales, row0, rows, cols, threads);
}

// A local matrix over the whole grid, row by row (the dequantize kernel, a rank's own shard), each
// CTA a contiguous range of rows (a CTA's share under 2^32 vectors). Rows, not 32-row bands: a
// matrix of few bands (a 768-row weight: 24) still spreads over the whole grid (column-block
// scales are found from the absolute row either way).
KOSMOS_DEVICE void grid_dequant_rows(u16* dst, const u8* data, const u8* scales, u64 rows, u32 cols, int blocks) {
  const u64 per_cta = (rows + gridDim.x - 1) / gridDim.x;
  const u64 r0 = per_cta * blockIdx.x, r1 = r0 + per_cta < rows ? r0 + per_cta : rows;
  if (r0 >= r1) return;
  u16* d = dst + r0 * cols;
  if (blocks == kColBlocks) cta_dequant_by_row<kColBlocks, 4>(d, data, scales, r0, u32(r1 - r0), cols, blockDim.x);
  else cta_dequant_by_row<kRowBlocks, 4>(d, data, scales, r0, u32(r1 - r0), cols, blockDim.x);
}

}  // namespace mx
}  // namespace kosmos
