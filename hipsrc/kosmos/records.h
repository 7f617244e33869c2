// Records in global memory (kosmos/runtime/records.py): a kernel whose records outgrow its
// parameters (HIP holds 4 KB) reads some from a device buffer, written by records.hip's launch just
// before it on the same stream. The words travel as that launch's parameters, so a CUDA graph that
// captures the pair replays both with the same bytes, and no host copy or sync is needed.
#pragma once
#include "kosmos/platform.h"

namespace kosmos {

constexpr int kRecordWords = 480;  // 3,840 B: under HIP's 4 KB with dst and n (records.py WORDS)

struct RecordWords {
  u64 w[kRecordWords];
};

}  // namespace kosmos
