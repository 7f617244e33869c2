// Records in global memory (kosmos/runtime/records.py): a kernel whose records outgrow its
// parameters (HIP holds 4 KB) reads some from a device buffer, written by this launch just before
// it on the same stream. The words travel as this launch's parameters, so a CUDA graph that
// captures the pair replays both with the same bytes, and no host copy or sync is needed.
#include "kosmos/platform.h"

using namespace kosmos;

constexpr int kRecordWords = 480;  // 3,840 B: under HIP's 4 KB with dst and n (records.py WORDS)

struct RecordWords {
  u64 w[kRecordWords];
};

// One CTA: dst[0, n) = words.w[0, n).
extern "C" __global__ void kosmos_put_words(const RecordWords words, u64* __restrict__ dst, i32 n) {
  for (i32 i = i32(threadIdx.x); i < n; i += i32(blockDim.x)) dst[i] = words.w[i];
}
