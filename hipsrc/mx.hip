// MXFP8 quantization kernels (kosmos/mx.py's rule, hipsrc/kosmos/mx/quant.h, dequant.h).
//
//   kosmos_mx_quantize_bf16: x [rows, cols] bf16 (both multiples of 32) -> the row-wise copy (blocks
//   along a row: data [rows, cols], scales [rows, cols / 32]) and the column-wise copy (blocks along a
//   column: data [rows, cols], scales [rows / 32, cols]) in one pass, both from x itself. One CTA of
//   64 threads per 32 x 32 tile: threads 0-31 own a row of it, 32-63 a column.
#include "kosmos/mx/dequant.h"
#include "kosmos/mx/quant.h"

using namespace kosmos;
using namespace kosmos::mx;

extern "C" __global__ void kosmos_mx_quantize_bf16(const u16* __restrict__ x, i64 rows, i64 cols,
                                                    u8* __restrict__ row_data, u8* __restrict__ row_scales,
                                                    u8* __restrict__ col_data, u8* __restrict__ col_scales) {
  __shared__ float tile[kBlock][kBlock + 1];
  const i64 tiles_c = cols / kBlock;
  const i64 r0 = i64(blockIdx.x) / tiles_c * kBlock, c0 = i64(blockIdx.x) % tiles_c * kBlock;
  if (r0 >= rows) return;
  for (int v = threadIdx.x; v < kBlock * kBlock; v += blockDim.x)
    tile[v / kBlock][v % kBlock] = bf16_to_f32(x[(r0 + v / kBlock) * cols + c0 + v % kBlock]);
  __syncthreads();
  const int t = threadIdx.x;
  if (t < kBlock) {
    const i64 r = r0 + t;
    row_scales[r * tiles_c + c0 / kBlock] =
        quantize_block([&](int i) { return tile[t][i]; }, row_data + r * cols + c0, 1);
  } else if (t < 2 * kBlock) {
    const int c = t - kBlock;
    col_scales[(r0 / kBlock) * cols + c0 + c] =
        quantize_block([&](int i) { return tile[i][c]; }, col_data + r0 * cols + c0 + c, cols);
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
