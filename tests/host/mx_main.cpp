// quantize_block (hipsrc/kosmos/mx/quant.h) on the host. stdin: int32 n; float blocks[n][32].
// stdout: uint8 data[n][32], then uint8 scales[n]. Argument "dequant": e4m3_to_bf16_scaled
// (hipsrc/kosmos/mx/dequant.h) instead; stdin int32 n, uint8 codes[n], uint8 scales[n]; stdout
// uint16 bf16[n]. Argument "ftz": run with the x86 FTZ and DAZ modes
// on (subnormal operands and results read and written as zero), as GPU code compiled by CuPy does.
// Argument "grid": grid_dequant_rows (the dequantize kernel's loop, row by row) run by CTAs of
// 3 threads in a grid of `ctas`, one thread after another; stdin int32 rows, cols, blocks, ctas,
// uint8 codes[rows][cols], uint8 scales[rows * cols / 32]; stdout uint16 bf16[rows][cols].
// Argument "range": cta_dequant_rows (a mover's pull: column blocks by bands) of rows [row0,
// row0 + count) by one CTA of `threads` threads into a buffer of count + 2 rows, the first and
// last guards (0xFFFF, which the loop must leave); stdin int32 rows, cols, blocks, threads, row0,
// count, then codes and scales as for "grid"; stdout uint16 [count + 2][cols].
#include <xmmintrin.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "kosmos/mx/dequant.h"
#include "kosmos/mx/quant.h"

using namespace kosmos::mx;

// An MXFP8 matrix from stdin: uint8 codes[rows][cols], then uint8 scales[rows * cols / 32].
static bool read_codes_and_scales(size_t rows, size_t cols, std::vector<unsigned char>& codes,
                                  std::vector<unsigned char>& scales) {
  codes.resize(rows * cols), scales.resize(rows * cols / 32);
  return fread(codes.data(), 1, codes.size(), stdin) == codes.size() &&
         fread(scales.data(), 1, scales.size(), stdin) == scales.size();
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "ftz") == 0) _mm_setcsr(_mm_getcsr() | 0x8040);  // FTZ | DAZ
  if (argc > 1 && strcmp(argv[1], "range") == 0) {
    int head[6];
    if (fread(head, 4, 6, stdin) != 6) return 2;
    const size_t rows = head[0], cols = head[1], row0 = head[4], count = head[5];
    std::vector<unsigned char> codes, scales;
    if (!read_codes_and_scales(rows, cols, codes, scales)) return 2;
    std::vector<unsigned short> out((count + 2) * cols, 0xFFFFu);
    blockDim.x = head[3];
    for (threadIdx.x = 0; threadIdx.x < blockDim.x; ++threadIdx.x)
      cta_dequant_rows(out.data() + cols, codes.data(), scales.data(), row0, unsigned(count), unsigned(cols), head[2],
                       blockDim.x);
    fwrite(out.data(), 2, out.size(), stdout);
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "grid") == 0) {
    int head[4];
    if (fread(head, 4, 4, stdin) != 4) return 2;
    const size_t rows = head[0], cols = head[1];
    std::vector<unsigned char> codes, scales;
    if (!read_codes_and_scales(rows, cols, codes, scales)) return 2;
    std::vector<unsigned short> out(rows * cols, 0xFFFFu);
    blockDim.x = 3;
    gridDim.x = head[3];
    for (blockIdx.x = 0; blockIdx.x < gridDim.x; ++blockIdx.x)
      for (threadIdx.x = 0; threadIdx.x < blockDim.x; ++threadIdx.x)
        grid_dequant_rows(out.data(), codes.data(), scales.data(), rows, cols, head[2]);
    fwrite(out.data(), 2, out.size(), stdout);
    return 0;
  }
  int n;
  if (fread(&n, 4, 1, stdin) != 1) return 2;
  if (argc > 1 && strcmp(argv[1], "dequant") == 0) {
    std::vector<unsigned char> codes(n), scales(n);
    if (fread(codes.data(), 1, n, stdin) != size_t(n) || fread(scales.data(), 1, n, stdin) != size_t(n)) return 2;
    std::vector<unsigned short> out(n);
    for (int i = 0; i < n; ++i) out[i] = e4m3_to_bf16_scaled(codes[i], scales[i]);
    fwrite(out.data(), 2, out.size(), stdout);
    return 0;
  }
  std::vector<float> v(size_t(n) * kBlock);
  if (fread(v.data(), 4, v.size(), stdin) != v.size()) return 2;
  std::vector<unsigned char> data(v.size()), scales(n);
  for (int b = 0; b < n; ++b) {
    const float* blk = v.data() + size_t(b) * kBlock;
    scales[b] = quantize_block([&](int i) { return blk[i]; }, data.data() + size_t(b) * kBlock, 1);
  }
  fwrite(data.data(), 1, data.size(), stdout);
  fwrite(scales.data(), 1, scales.size(), stdout);
  return 0;
}
