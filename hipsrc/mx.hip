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
// along a row, row_blocks = 1, or [rows / 32, cols] for blocks along a column) -> bf16 [rows, cols].
extern "C" __global__ void kosmos_mx_dequantize_bf16(const u8* __restrict__ data, const u8* __restrict__ scales,
                                                     i64 rows, i64 cols, i32 row_blocks, u16* __restrict__ out) {
  for (i64 v = i64(blockIdx.x) * blockDim.x + threadIdx.x; v < rows * cols; v += i64(gridDim.x) * blockDim.x) {
    const i64 r = v / cols, c = v % cols;
    const u8 s = row_blocks ? scales[r * (cols / kBlock) + c / kBlock] : scales[(r / kBlock) * cols + c];
    out[v] = e4m3_to_bf16_scaled(data[v], s);
  }
}
