// kosmos_put_words: one device record's bytes, carried as this launch's parameters (kosmos/records.h).
#include "kosmos/records.h"

using namespace kosmos;

// One CTA: dst[0, n) = words.w[0, n).
extern "C" __global__ void kosmos_put_words(const RecordWords words, u64* __restrict__ dst, i32 n) {
  for (i32 i = i32(threadIdx.x); i < n; i += i32(blockDim.x)) dst[i] = words.w[i];
}
