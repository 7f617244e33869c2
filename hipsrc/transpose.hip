// kosmos_transpose_b32: out [cols, rows] = in [rows, cols]^T, fp32 (kosmos.gemm's swapped MXFP8 TN,
// mx_route, transposes an fp32 result with it; a bf16 one its epilogue stores transposed); rows and
// cols multiples of 8, 16-byte aligned bases.
// 64 x 64 tiles through shared memory, read and written as 16-byte vectors (a padded pitch: the
// row-wise fill is free of bank conflicts, the column reads 2-way); 256 threads, grid
// (ceil(rows / 64), ceil(cols / 64)). Its own file: gemm.hip's kernels all take the builder's
// dynamic shared memory, and on gfx942 this one's static 8 KB would not fit beside it.
#include "kosmos/platform.h"

using namespace kosmos;

extern "C" __global__ void __launch_bounds__(256) kosmos_transpose_b32(const u32* __restrict__ in, u32* __restrict__ out,
                                                                      i64 rows, i64 cols) {
  constexpr int kTile = 64, kVec = 4, kPitch = kTile + 1, kVecsPerRow = kTile / kVec;
  __shared__ u32 tile[kTile][kPitch];
  const i64 r0 = i64(blockIdx.x) * kTile, c0 = i64(blockIdx.y) * kTile;
  for (int v = threadIdx.x; v < kTile * kVecsPerRow; v += blockDim.x) {
    const int r = v / kVecsPerRow, c = v % kVecsPerRow * kVec;
    if (r0 + r < rows && c0 + c < cols) {
      const vec16 x = ld16(in + (r0 + r) * cols + c0 + c);
      tile[r][c] = x.x, tile[r][c + 1] = x.y, tile[r][c + 2] = x.z, tile[r][c + 3] = x.w;
    }
  }
  __syncthreads();
  for (int v = threadIdx.x; v < kTile * kVecsPerRow; v += blockDim.x) {
    const int c = v / kVecsPerRow, r = v % kVecsPerRow * kVec;  // out row c0 + c, its elements r0 + r ...
    if (c0 + c < cols && r0 + r < rows)
      st16(out + (c0 + c) * rows + r0 + r, vec16{tile[r][c], tile[r + 1][c], tile[r + 2][c], tile[r + 3][c]});
  }
}
