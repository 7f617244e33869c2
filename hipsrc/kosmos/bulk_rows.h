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
// during the call, no valid mbarrier either). Double-buffered batches: warp 0 gathers batch b + 1
// into one half while batch b, in the other, is transformed by all threads (xform, if any) and
// stored by thread 0 in one copy.
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

template <int Unroll = kMoverUnroll, class Src, class Xform = KeepVectors>
KOSMOS_DEVICE void bulk_copy_rows(u8* stage, u32 stage_bytes, u8* dst, const Src& src, u32 rows, u32 row_bytes,
                                  const Xform& xform = Xform{}) {
#if KOSMOS_GEMM_WGMMA
  using namespace gemm::sm90;
  constexpr bool kKeep = kKeepsVectors<Xform>;
  // the batches' two mbarriers in the first 128 bytes (no static shared memory: the fused kernels
  // use nearly all of it), the halves after them
  u64* bars = reinterpret_cast<u64*>(stage);
  const u32 half = stage_bytes > 128 ? (stage_bytes - 128) / 2 / 16 * 16 : 0, per = half / row_bytes;
  stage += 128;
  if (per > 0) {
    if (threadIdx.x == 0) {
      mbar_init(&bars[0], 1);
      mbar_init(&bars[1], 1);
      mbar_fence_init();
    }
    // rows another CTA wrote (and released; the caller acquired) before this warp's bulk loads
    // read them: generic-proxy acquire, async-proxy reads
    if (threadIdx.x < 32) fence_proxy_async_global();
    __syncthreads();
    const u32 batches = (rows + per - 1) / per, vecs = row_bytes / 16, lane = threadIdx.x % 32;
    // Warp 0 issues: each lane loads its rows' sources (src may read memory: d.order[r]) and
    // issues their copies, so the address loads overlap instead of queueing behind one thread.
    const auto load = [&](u32 b) {
      u8* buf = stage + (b & 1) * half;
      const u32 first = b * per, n = min(per, rows - first);
      if (lane == 0) mbar_arrive_expect_tx(&bars[b & 1], n * row_bytes);
      __syncwarp();
      for (u32 i = lane; i < n; i += 32) bulk_load(buf + i * row_bytes, src(first + i), row_bytes, &bars[b & 1]);
    };
    // Without a transform only warp 0 takes part (its __syncwarp before each load keeps every lane
    // past the barrier phase the load re-arms); with one, the CTA barrier of each batch does.
    if (kKeep ? threadIdx.x < 32 : true) {
      if (threadIdx.x < 32 && batches > 0) load(0);
      for (u32 b = 0; b < batches; ++b) {
        if (threadIdx.x < 32 && b + 1 < batches) {
          if (lane == 0) bulk_wait_read_all();  // batch b - 1's store has read the half that batch b + 1 fills
          __syncwarp();
          load(b + 1);
        }
        mbar_wait(&bars[b & 1], (b >> 1) & 1);
        u8* buf = stage + (b & 1) * half;
        const u32 first = b * per, n = min(per, rows - first);
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
      }
      if (threadIdx.x == 0) bulk_wait_all();  // in global memory before the caller releases the rows
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      mbar_inval(&bars[0]);
      mbar_inval(&bars[1]);
    }
    __syncthreads();
    return;
  }
#endif
  (void)stage;
  (void)stage_bytes;
  cta_copy_rows<Unroll>([&](u32 r) { return dst + u64(r) * row_bytes; }, src, rows, row_bytes, xform);
}

}  // namespace kosmos
