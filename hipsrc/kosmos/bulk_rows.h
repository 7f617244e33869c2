// Rows copied through shared memory by the bulk-copy engine (Hopper's 1-D TMA, cp.async.bulk), for
// movers that share their SM with the GEMM builder: the bytes in flight sit in the pipeline's
// shared memory, idle while the CTA moves, instead of registers. (A register copy at the builder's
// 168 entry registers either keeps ~24 KB in flight or spills its vectors: 6-14 GB/s per CTA,
// notes/moe.md session 12.) Elsewhere (no bulk copies, or no room for two rows) it is
// cta_copy_rows.
//
//   bulk_copy_rows<Unroll>(stage, stage_bytes, dst, src, rows, row_bytes[, xform])
//
// Called by all threads of the CTA, with cta_copy_rows's arguments except that the destination
// rows are consecutive from `dst`, plus the staging area (stage_after; nothing else in use there
// during the call, no valid mbarrier either). Batches of rows go round a ring of slots: warp 0
// gathers the next batches into free slots while batch b is transformed by all threads (xform, if
// any) and stored by thread 0 in one copy.
// Every row is written to global memory when it returns (the caller may release it).
#pragma once
#include "gemm/arch.h"
#include "mover.h"
#if KOSMOS_GEMM_WGMMA
#include "gemm/sm90_wgmma.h"
#endif

namespace kosmos {

// The staging area a mover kernel's dynamic shared memory (`smem`, `smem_bytes` of it) leaves
// after its tables (`table_bytes` at its start): 128-byte aligned, empty when nothing is left.
struct Stage {
  u8* at;
  u32 bytes;
};
KOSMOS_DEVICE Stage stage_after(u8* smem, u64 table_bytes, u32 smem_bytes) {
  const u32 tables = u32(table_bytes + 127) / 128 * 128;
  return Stage{smem + tables, smem_bytes > tables ? smem_bytes - tables : 0};
}

// The staging area is a ring of slots, each with its mbarrier; a few slots of this size keep
// several loads in flight while earlier slots are stored (-D to tune).
#ifndef KOSMOS_BULK_SLOT_BYTES
#define KOSMOS_BULK_SLOT_BYTES 32768
#endif
constexpr u32 kBulkSlotBytes = KOSMOS_BULK_SLOT_BYTES;
constexpr u32 kBulkMaxSlots = 16;  // their mbarriers fill the stage's first 128 bytes

template <int Unroll = kMoverUnroll, class Src, class Xform = KeepVectors>
KOSMOS_DEVICE void bulk_copy_rows(u8* stage, u32 stage_bytes, u8* dst, const Src& src, u32 rows, u32 row_bytes,
                                  const Xform& xform = Xform{}) {
#if KOSMOS_GEMM_WGMMA
  using namespace gemm::sm90;
  constexpr bool kKeep = kKeepsVectors<Xform>;
  u64* bars = reinterpret_cast<u64*>(stage);
  const u32 room = stage_bytes > 128 ? stage_bytes - 128 : 0;
  // slots of whole rows: kBulkSlotBytes, or fewer larger ones where rows are long; at least two
  const u32 slot_rows = max(1u, kBulkSlotBytes / row_bytes), slots = min(kBulkMaxSlots, room / (slot_rows * row_bytes));
  stage += 128;
  if (slots >= 2) {
    const u32 slot_bytes = slot_rows * row_bytes, batches = (rows + slot_rows - 1) / slot_rows;
    if (threadIdx.x == 0) {
      for (u32 i = 0; i < slots; ++i) mbar_init(&bars[i], 1);
      mbar_fence_init();
    }
    // rows another CTA wrote (and released; the caller acquired) before this warp's bulk loads
    // read them: generic-proxy acquire, async-proxy reads
    if (threadIdx.x < 32) fence_proxy_async_global();
    __syncthreads();
    const u32 vecs = row_bytes / 16, lane = threadIdx.x % 32;
    // Warp 0 fills: each lane loads its rows' sources (src may read memory: d.order[r]) and issues
    // their copies, so the address loads overlap instead of queueing behind one thread.
    const auto fill = [&](u32 b) {
      const u32 slot = b % slots, first = b * slot_rows, n = min(slot_rows, rows - first);
      u8* buf = stage + slot * slot_bytes;
      if (lane == 0) mbar_arrive_expect_tx(&bars[slot], n * row_bytes);
      __syncwarp();
      for (u32 i = lane; i < n; i += 32) bulk_load(buf + i * row_bytes, src(first + i), row_bytes, &bars[slot]);
    };
    // Without a transform only warp 0 takes part (its __syncwarp before each fill keeps every lane
    // past the barrier phase the fill re-arms); with one, the CTA barrier of each batch does.
    if (kKeep ? threadIdx.x < 32 : true) {
      if (threadIdx.x < 32)
        for (u32 b = 0; b < min(slots, batches); ++b) fill(b);
      for (u32 b = 0; b < batches; ++b) {
        const u32 slot = b % slots, first = b * slot_rows, n = min(slot_rows, rows - first);
        u8* buf = stage + slot * slot_bytes;
        mbar_wait(&bars[slot], (b / slots) & 1);
        if constexpr (!kKeep) {
          for (u32 f = threadIdx.x; f < n * vecs; f += blockDim.x) {
            vec16* p = reinterpret_cast<vec16*>(buf + u64(f / vecs) * row_bytes) + f % vecs;
            vec16 v = *p;
            xform(first + f / vecs, v);
            *p = v;
          }
          fence_proxy_async_shared();  // this thread's shared-memory writes, before the bulk store reads them
          __syncthreads();
        }
        if (threadIdx.x == 0) {  // the destination rows are consecutive: one copy per batch
          bulk_store(dst + u64(first) * row_bytes, buf, n * row_bytes);
          bulk_commit();
        }
        // refill the previous batch's slot once its store (every group but the newest) has read it
        if (threadIdx.x < 32 && b >= 1 && b - 1 + slots < batches) {
          if (lane == 0) bulk_wait_read_but_one();
          __syncwarp();
          fill(b - 1 + slots);
        }
      }
      if (threadIdx.x == 0) bulk_wait_all();  // in global memory before the caller releases the rows
    }
    __syncthreads();
    if (threadIdx.x == 0)
      for (u32 i = 0; i < slots; ++i) mbar_inval(&bars[i]);
    __syncthreads();
    return;
  }
#endif
  (void)stage;
  (void)stage_bytes;
  cta_copy_rows<Unroll>([&](u32 r) { return dst + u64(r) * row_bytes; }, src, rows, row_bytes, xform);
}

}  // namespace kosmos
