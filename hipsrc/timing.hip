// The benchmarks' stream blocker (kosmos/timing.py): one thread holds the stream until the host
// has queued every timed call, so device events time the GPU work and not the Python that issues
// it (NVBench's "blocking kernel" method). It gives up after budget_ns and says so, never hangs.
#include "kosmos/platform.h"

using namespace kosmos;

// words[0]: release (host writes 1), words[1]: set to 1 here when the budget ran out first.
extern "C" __global__ void kosmos_block_stream(u64* words, u64 budget_ns) {
  const u64 t0 = now_ns();
  while (ld_acquire_sys(words) == 0) {
    if (now_ns() - t0 > budget_ns) {
      words[1] = 1;
      return;
    }
    sleep_briefly();
  }
}
