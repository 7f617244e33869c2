// MXFP8 quantization kernels (kosmos/mx.py's rule, hipsrc/kosmos/mx/quant.h, dequant.h).
//
//   kosmos_mx_quantize_bf16: x [rows, cols] bf16 (both multiples of 32) -> the row-wise copy (blocks
//   along a row: data [rows, cols], scales [rows, cols / 32]) and the column-wise copy (blocks along a
//   column: data [rows, cols], scales [rows / 32, cols]) in one pass, both from x itself. One CTA of
//   256 threads per 32 x 256 tile (the last of a band may be narrower).
#include "kosmos/mx/dequant.h"
#include "kosmos/mx/quant.h"

using namespace kosmos;
using namespace kosmos::mx;

constexpr int kStrip = 256;  // columns per CTA: a 32 x 256 tile, a thread per row block and per column

extern "C" __global__ void __launch_bounds__(kStrip) kosmos_mx_quantize_bf16(
    const u16* __restrict__ x, i64 rows, i64 cols, u8* __restrict__ row_data, u8* __restrict__ row_scales,
    u8* __restrict__ col_data, u8* __restrict__ col_scales) {
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
    // column pass: thread t quantizes column t of the 32 rows (a warp writes 32 consecutive bytes a row)
    col_scales[(r0 / kBlock) * cols + c0 + t] = quantize_block_packed([&](int i) { return bf16_to_f32(tile[i][t]); }, codes);
#pragma unroll
    for (int i = 0; i < kBlock; ++i) col_data[(r0 + i) * cols + c0 + t] = u8(codes[i / 4] >> (8 * (i % 4)));
  }
}

// kosmos_mx_dequantize_bf16: an MXFP8 copy (data [rows, cols]; scales [rows, cols / 32] for blocks
// along a row, blocks = kRowBlocks, or [rows / 32, cols] for kColBlocks) -> bf16 [rows, cols]; each
// CTA takes a contiguous range of 32-row bands (grid_dequant_rows: the movers' loop; the host keeps
// a CTA's share under 2^32 vectors).
extern "C" __global__ void kosmos_mx_dequantize_bf16(const u8* __restrict__ data, const u8* __restrict__ scales,
                                                     i64 rows, i64 cols, i32 blocks, u16* __restrict__ out) {
  grid_dequant_rows(out, data, scales, u64(rows), u32(cols), blocks);
}
