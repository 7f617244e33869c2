// MXFP8 quantization kernels (kosmos/mx.py's rule, hipsrc/kosmos/mx/quant.h, dequant.h).
//
//   kosmos_mx_quantize_bf16: x [rows, cols] bf16 (both multiples of 32) -> the row-wise copy (blocks
//   along a row: data [rows, cols], scales [rows, cols / 32]) and the column-wise copy in one pass,
//   both from x itself. The column-wise copy is blocked along x's columns (transposed = 0: data
//   [rows, cols], scales [rows / 32, cols]) or stored transposed, as the row-wise copy of x^T
//   (transposed = 1: data [cols, rows], scales [cols, rows / 32]; a wgrad's operands K-major, so its
//   NT GEMM runs as a TN). One CTA of 256 threads per 32 x 256 tile (the last of a band may be narrower).
#include "kosmos/mx/dequant.h"
#include "kosmos/mx/mfma_scale.h"
#include "kosmos/mx/quant.h"

using namespace kosmos;
using namespace kosmos::mx;

constexpr int kStrip = 256;  // columns per CTA: a 32 x 256 tile, a thread per row block and per column

extern "C" __global__ void __launch_bounds__(kStrip) kosmos_mx_quantize_bf16(
    const u16* __restrict__ x, i64 rows, i64 cols, u8* __restrict__ row_data, u8* __restrict__ row_scales,
    u8* __restrict__ col_data, u8* __restrict__ col_scales, i32 transposed) {
  // 8 columns of padding: the row pass's 16-byte reads (a warp = one block of 32 rows) fall on
  // distinct banks; the column pass reads consecutive columns.
  __shared__ __align__(16) u16 tile[kBlock][kStrip + 8];
  const i64 strips = (cols + kStrip - 1) / kStrip;
  const i64 r0 = i64(blockIdx.x) / strips * kBlock, c0 = i64(blockIdx.x) % strips * kStrip;
  if (r0 >= rows) return;
  const int width = int(cols - c0 < kStrip ? cols - c0 : kStrip);  // a multiple of 32
  for (int v = threadIdx.x; v < kBlock * width / 8; v += blockDim.x) {
    const int r = v / (width / 8), c = v % (width / 8) * 8;
    *reinterpret_cast<vec16*>(&tile[r][c]) = ld16(x + (r0 + r) * cols + c0 + c);
  }
  __syncthreads();
  const int t = threadIdx.x;
  u32 codes[8];
  if (t < width) {
    // row pass: thread t quantizes block t / 32 of row t % 32
    const int r = t % kBlock, b = t / kBlock;
    u32 pairs[16];
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // 16-byte reads: a quarter warp's 8 rows hit 32 distinct banks
      const vec16 v = ld16(&tile[r][kBlock * b + 8 * q]);
      pairs[4 * q] = v.x, pairs[4 * q + 1] = v.y, pairs[4 * q + 2] = v.z, pairs[4 * q + 3] = v.w;
    }
    row_scales[(r0 + r) * (cols / kBlock) + c0 / kBlock + b] = quantize_block_packed(
        [&](int i) { return bf16_to_f32(u16(pairs[i / 2] >> (16 * (i % 2)))); }, codes);
    u8* dst = row_data + (r0 + r) * cols + c0 + kBlock * b;
    st16(dst, vec16{codes[0], codes[1], codes[2], codes[3]});
    st16(dst + 16, vec16{codes[4], codes[5], codes[6], codes[7]});
    // column pass: thread t quantizes column t of the 32 rows
    const u8 scale = quantize_block_packed([&](int i) { return bf16_to_f32(tile[i][t]); }, codes);
    if (transposed) {  // the block is 32 consecutive bytes of x^T's row c0 + t
      col_scales[(c0 + t) * (rows / kBlock) + r0 / kBlock] = scale;
      u8* tdst = col_data + (c0 + t) * rows + r0;
      st16(tdst, vec16{codes[0], codes[1], codes[2], codes[3]});
      st16(tdst + 16, vec16{codes[4], codes[5], codes[6], codes[7]});
    } else {  // a warp writes 32 consecutive bytes a row
      col_scales[(r0 / kBlock) * cols + c0 + t] = scale;
#pragma unroll
      for (int i = 0; i < kBlock; ++i) col_data[(r0 + i) * cols + c0 + t] = u8(codes[i / 4] >> (8 * (i % 4)));
    }
  }
}

// kosmos_mx_dequantize_bf16: an MXFP8 copy (data [rows, cols]; scales [rows, cols / 32] for blocks
// along a row, blocks = kRowBlocks, or [rows / 32, cols] for kColBlocks) -> bf16 [rows, cols]; each
// CTA takes a contiguous range of rows (grid_dequant_rows: the movers' loop; the host keeps a
// CTA's share under 2^32 vectors).
extern "C" __global__ void kosmos_mx_dequantize_bf16(const u8* __restrict__ data, const u8* __restrict__ scales,
                                                     i64 rows, i64 cols, i32 blocks, u16* __restrict__ out) {
  grid_dequant_rows(out, data, scales, u64(rows), u32(cols), blocks);
}

// kosmos_mx_kperm_bf16: the B operand of the MXFP8-A GEMM (builder_wgmma.h, TileConfig MxA): bf16
// [rows, cols] with its reduction index permuted within each 64-slab, logical index L holding
// natural index k_natural(L), and padded with zeros to whole slabs. permute_rows = 0 (TN: B is
// [N, K], columns permuted, out [rows, ceil64(cols)]) or 1 (NN: B is [K, N], rows permuted, out
// [ceil64(rows), cols]). The source is an MXFP8 copy (blocks kRowBlocks / kColBlocks, dequantized
// exactly as kosmos_mx_dequantize_bf16) or bf16 (blocks kNone: data holds bf16, scales unused).
KOSMOS_DEVICE u32 k_natural(u32 l) { return 16 * ((l % 8) / 2) + 4 * (l / 16) + 2 * ((l % 16) / 8) + l % 2; }

// Two consecutive elements (r, c), (r, c + 1) of the source as a bf16 pair (c even).
KOSMOS_DEVICE u32 source_pair(const u8* data, const u8* scales, i64 r, i64 c, i64 cols, int blocks) {
  if (blocks == kNone) return *reinterpret_cast<const u32*>(reinterpret_cast<const u16*>(data) + r * cols + c);
  const u32 codes = *reinterpret_cast<const u16*>(data + r * cols + c);
  if (blocks == kRowBlocks) {
    const u32 sc = scales[r * (cols / 32) + c / 32];
    return e4m3x2_to_bf16x2_scaled(codes, sc, sc);
  }
  return e4m3x2_to_bf16x2_scaled(codes, scales[(r / 32) * cols + c], scales[(r / 32) * cols + c + 1]);
}

extern "C" __global__ void kosmos_mx_kperm_bf16(const u8* __restrict__ data, const u8* __restrict__ scales, i64 rows,
                                                i64 cols, i32 blocks, i32 permute_rows, u16* __restrict__ out) {
  const i64 out_rows = permute_rows ? (rows + 63) / 64 * 64 : rows;
  const i64 out_cols = permute_rows ? cols : (cols + 63) / 64 * 64;
  const i64 vecs = out_rows * (out_cols / 8);  // 8 bf16 (16 bytes) a thread
  for (i64 v = i64(blockIdx.x) * blockDim.x + threadIdx.x; v < vecs; v += i64(gridDim.x) * blockDim.x) {
    const i64 r = v / (out_cols / 8), c0 = v % (out_cols / 8) * 8;
    u32 w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      i64 sr = r, sc = c0 + 2 * j;
      if (permute_rows) sr = r / 64 * 64 + k_natural(u32(r % 64));
      else sc = c0 / 64 * 64 + k_natural(u32(c0 % 64 + 2 * j));  // a logical pair is a natural pair
      // (cols is even and a natural pair never straddles the end: both or neither inside)
      w[j] = (sr < rows && sc < cols) ? source_pair(data, scales, sr, sc, cols, blocks) : 0u;
    }
    st16(out + r * out_cols + c0, vec16{w[0], w[1], w[2], w[3]});
  }
}

// kosmos_mx_regs_dequant: the MXFP8-A mainloop's conversions (dequant.h) over words[n] of four codes
// each under scales[n] (one code a word): out[2 i], out[2 i + 1] the word's two bf16 pairs by the
// two-multiply form (every scale), one[2 i], one[2 i + 1] by the one-multiply form where the scale is
// at most kOneMultiplyMaxScale (else untouched), nan[i] 1 where the word has a NaN code, else 0.
// Hopper only (elsewhere it writes nothing and kosmos.mx refuses it); a test kernel:
// tests/gpu/test_mx.py runs every (code, scale).
extern "C" __global__ void kosmos_mx_regs_dequant(const u32* __restrict__ words, const u8* __restrict__ scales, i64 n,
                                                  u32* __restrict__ out, u32* __restrict__ one, u32* __restrict__ nan) {
#if KOSMOS_SM90  // the register conversion (dequant.h) is Hopper's
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x) {
    e4m3x4_to_bf16x4_scaled(words[i], e8m0_to_bf16x2(scales[i]), out[2 * i], out[2 * i + 1]);
    if (scales[i] <= kOneMultiplyMaxScale)
      e4m3x4_to_bf16x4_one_multiply(words[i], e8m0_one_multiply_bf16x2(scales[i]), one[2 * i], one[2 * i + 1]);
    nan[i] = e4m3_nan_in(e4m3x4_nan_seen(words[i])) ? 1u : 0u;
  }
#endif
}

// kosmos_mx_native: out[0] = 1 where this compile has the CDNA4 block-scaled MFMA (gfx950).
extern "C" __global__ void kosmos_mx_native(int* out) { out[0] = KOSMOS_MX_SCALED_MFMA; }

// kosmos_mx_gemm_tn: C[m, n] (bf16) = A[m, k] B[n, k]^T on row-blocked MXFP8 operands through the
// block-scaled MFMA (gfx950 only; elsewhere the body is empty and the host refuses to launch it).
// Correctness first: a CTA of 4 waves per 128 x 128 tile, each wave 64 x 64 (2 x 2 MFMAs),
// fragments straight from global memory (no LDS, no pipeline); k a multiple of 64.
extern "C" __global__ void __launch_bounds__(256) kosmos_mx_gemm_tn(const u8* __restrict__ a, const u8* __restrict__ sa,
                                                                    const u8* __restrict__ b, const u8* __restrict__ sb,
                                                                    i64 m, i64 n, i64 k, u16* __restrict__ c) {
#if KOSMOS_MX_SCALED_MFMA
  const int wave = threadIdx.x / 64, lane = threadIdx.x % 64;
  const i64 tiles_n = (n + 127) / 128;
  const i64 m0 = i64(blockIdx.x) / tiles_n * 128 + (wave / 2) * 64;
  const i64 n0 = i64(blockIdx.x) % tiles_n * 128 + (wave % 2) * 64;
  mx_f32x16 acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 16; ++e) acc[i][j][e] = 0.0f;
  for (i64 k0 = 0; k0 < k; k0 += 64) {
    MxFrag fa[2], fb[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) fa[i] = load_frag(a, sa, m, k, m0 + 32 * i + lane % 32, k0, lane);
#pragma unroll
    for (int j = 0; j < 2; ++j) fb[j] = load_frag(b, sb, n, k, n0 + 32 * j + lane % 32, k0, lane);
    // B's rows first: the lane's output column is then A's row (gemm/mfma.h does the same)
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) acc[i][j] = mfma_scale(fb[j], fa[i], acc[i][j]);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const i64 row = m0 + 32 * i + lane % 32;
    if (row >= m) continue;
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        const i64 col = n0 + 32 * j + 8 * (e / 4) + 4 * (lane / 32) + e % 4;
        if (col < n) c[row * n + col] = f32_to_bf16(acc[i][j][e]);
      }
  }
#endif
}
