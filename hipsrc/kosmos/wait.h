// Bounded device waits. A wait that outlives its budget records (kernel, rank, site) in the
// status word (host-mapped, so the host can read it without a sync) and returns false; the
// caller then leaves the kernel. Every wait also gives up early once any CTA of this rank has
// failed, so one failure drains the whole grid instead of leaving it spinning, and once any
// peer rank has failed: the first failure on a rank is told to every peer (a word in each peer's
// part of the World's failure heap), whose waits then stop and record "rank r failed first".
// A failure therefore reaches every rank within one polling interval, not one budget per rank.
//
// kosmos/runtime/status.py mirrors the enums below (KERNELS, SITES) to name kernels and sites in
// KosmosTimeoutError; kosmos/runtime/mirror.py checks the mirror at compile time.
#pragma once
#include "platform.h"

namespace kosmos {

enum KernelId : u32 {
  KERNEL_NONE = 0,
  KERNEL_ALL_GATHER = 1,
  KERNEL_REDUCE_SCATTER = 2,
  KERNEL_ALL_TO_ALL = 3,
  KERNEL_BARRIER = 4,
  KERNEL_WAIT_PROBE = 5,
  KERNEL_COPY_BENCH = 6,
  KERNEL_GEMM = 7,
  KERNEL_AG_GEMM = 8,
  KERNEL_GEMM_RS = 9,
  KERNEL_BULK_AG_GEMM = 10,
  KERNEL_BULK_RS_GEMM = 11,
  KERNEL_MOE_DISPATCH = 12,
  KERNEL_MOE_COMBINE = 13,
  KERNEL_COUNT_ = 14,  // how many there are (the host mirror is checked to have them all)
};

enum WaitSite : u32 {
  SITE_NONE = 0,
  SITE_PEER_DONE = 1,       // a peer has not finished reading my staging from the last call
  SITE_PEER_READY = 2,      // a peer's staged input for this call has not arrived
  SITE_SENTINEL = 3,        // a peer's reduce-scatter partial still holds the NaN sentinel
  SITE_PEER_ARRIVED = 4,    // a peer has not finished pushing into my arena
  SITE_ARENA_FREE = 5,      // a peer has not finished copying out of its arena from the last call
  SITE_BARRIER = 6,         // a peer has not reached the heap barrier
  SITE_PROBE = 7,           // the deliberately unmatched wait of the timeout test
  SITE_TILE_READY = 8,      // a GEMM input tile row has not been gathered yet
  SITE_GRID = 9,            // other CTAs of this grid have not finished a phase
  SITE_COUNT_ = 10,         // how many there are (the host mirror is checked to have them all)
};

struct Status {
  u32 code;    // 0 = ok, 1 = this rank's wait timed out, 2 + p = it stopped because rank p failed first
  u32 kernel;  // KernelId
  u32 rank;
  u32 site;    // WaitSite
};

// What every bounded wait needs to know; passed by value into the kernel.
struct WaitCtx {
  Status* status;      // host-mapped: the host reads it without synchronizing
  u32* abort;          // device memory: polled by waiting threads (cheap, unlike a read over PCIe)
  u32* told;           // this rank's word of the World's failure heap: 1 + p once rank p failed (or null)
  const u64* peers;    // the failure heap's base on every rank (device table), or null alone
  u64 told_off;        // the word's offset in every rank's failure heap
  u64 budget_ns;
  u32 kernel;
  u32 rank;
  u32 world;
  u32 pad_;
};

KOSMOS_DEVICE u32 told_by(const WaitCtx& w) { return w.told ? ld_relaxed_sys_u32(w.told) : 0u; }

KOSMOS_DEVICE bool failed(const WaitCtx& w) { return ld_relaxed_dev_u32(w.abort) != 0 || told_by(w) != 0; }

// This rank's first failure (device CAS on device memory) reports to the host, writing `code`
// last so the host never sees a half-written record. Returns whether this call was the first.
KOSMOS_DEVICE bool record_status(const WaitCtx& w, u32 code, u32 site) {
  if (atomicCAS(w.abort, 0u, 1u) != 0u) return false;
  w.status->kernel = w.kernel;
  w.status->rank = w.rank;
  w.status->site = site;
  fence_acq_rel_sys();
  st_relaxed_sys_u32(&w.status->code, code);
  fence_acq_rel_sys();
  return true;
}

KOSMOS_DEVICE void record_timeout(const WaitCtx& w, u32 site) {
  if (!record_status(w, 1u, site) || !w.peers) return;
  for (u32 p = 0; p < w.world; ++p)  // tell every peer, so that nobody waits out a whole budget for us
    if (p != w.rank) st_relaxed_sys_u32(reinterpret_cast<u32*>(w.peers[p] + w.told_off), w.rank + 1u);
  fence_acq_rel_sys();
}

// A wait that stopped because the grid or a peer failed: a peer's failure is recorded here once.
KOSMOS_DEVICE void record_stop(const WaitCtx& w, u32 site) {
  const u32 by = told_by(w);
  if (by != 0u) record_status(w, 1u + by, site);  // code 2 + p for rank p
}

// Between work items: false (after recording a peer's failure, if that is the reason) once the
// grid or a peer has failed, so a CTA that leaves without waiting still tells the host why.
KOSMOS_DEVICE bool still_ok(const WaitCtx& w, u32 site) {
  if (!failed(w)) return true;
  record_stop(w, site);
  return false;
}

// Spin until ready() is true, the budget is spent, or the grid has failed.
template <class Ready>
KOSMOS_DEVICE bool bounded_wait(const WaitCtx& w, u32 site, Ready ready) {
  if (ready()) return true;
  const u64 start = now_ns();
  for (u32 spin = 1;; ++spin) {
    if (ready()) return true;
    if ((spin & 63u) == 0u) {
      if (failed(w)) {
        record_stop(w, site);
        return false;
      }
      if (now_ns() - start > w.budget_ns) {
        record_timeout(w, site);
        return false;
      }
      sleep_briefly();
    }
  }
}

// Wait for a u64 flag (written with a system-scope release by a peer) to reach `target`.
KOSMOS_DEVICE bool wait_flag_sys(const WaitCtx& w, u32 site, const u64* flag, u64 target) {
  return bounded_wait(w, site, [&] { return ld_acquire_sys(flag) >= target; });
}

KOSMOS_DEVICE bool wait_flag_dev(const WaitCtx& w, u32 site, const u64* flag, u64 target) {
  return bounded_wait(w, site, [&] { return ld_acquire_dev(flag) >= target; });
}

}  // namespace kosmos
