// The portable builder (mma.sync on NVIDIA without wgmma, MFMA on AMD CDNA): all kThreads
// threads stage each kTileK-deep slab of A and B into K-contiguous shared tiles with 16-byte
// loads (transposing MN-major operands on the way), then the compute warps run ArchMma.
// Single-stage and synchronous: correct everywhere, fast nowhere; the Hopper path is the fast one.
#pragma once
#include "config.h"
#include "epilogue.h"
#include "job.h"
#include "schedule.h"
#include "../trace.h"
#if KOSMOS_GEMM_MFMA
#include "mfma.h"
#include "mfma_mx.h"
#else
#include "mma_sync.h"
#endif

namespace kosmos {
namespace gemm {

// Stage rows [0, rows) of the tile operand into s[rows][kLdS] (K-contiguous).
//   kmajor: global element (row r, k) at g[r_index(r) * ld + k]
//   else:   global element (row r, k) at g[k * ld + r_index(r)]
// Rows whose global index is >= rlim and k >= klim read as zero.
template <bool KMajor, int Rows, int LdS, class RowIndex>
KOSMOS_DEVICE void stage_operand(u16* s, const u16* g, i32 ld, i32 k0, i32 rlim, i32 klim, RowIndex row_index) {
  constexpr int kVecs = Rows * kTileK / 8;  // 16-byte vectors
  for (int v = threadIdx.x; v < kVecs; v += kThreads) {
    vec16 x = {0u, 0u, 0u, 0u};
    if (KMajor) {
      const int r = v / (kTileK / 8), kc = (v % (kTileK / 8)) * 8;
      const i32 gr = row_index(r);
      if (gr < rlim && k0 + kc < klim) x = ld16(g + i64(gr) * ld + k0 + kc);
      st16(s + r * LdS + kc, x);  // LdS*2 and kc*2 are multiples of 16 bytes
    } else {
      const int k = v / (Rows / 8), rc = (v % (Rows / 8)) * 8;
      const i32 gr = row_index(rc);  // 8 consecutive rows stay inside one 64-row chunk
      if (gr < rlim && k0 + k < klim) x = ld16(g + i64(k0 + k) * ld + gr);
      const u16* e = reinterpret_cast<const u16*>(&x);
#pragma unroll
      for (int i = 0; i < 8; ++i) s[(rc + i) * LdS + k] = e[i];
    }
  }
}

#if KOSMOS_GEMM_MFMA
// An MXFP8 slab (TileConfig::kMxB, K-major operands only): rows [0, Rows) of the tile operand's
// E4M3 codes k0 .. k0 + 63 into s[Rows][MfmaMx::kLdS] bytes and their two E8M0 scales into
// ss[Rows][2]. Rows at or past rlim and codes at or past klim read as zero codes at scale 2^0 (127:
// a NaN scale would make their zeros NaN); k0 and klim are multiples of 32, so a block is whole.
template <int Rows, class RowIndex>
KOSMOS_DEVICE void stage_mx_operand(u8* s, u8* ss, const u8* g, const u8* scales, i32 ld, i32 k0, i32 rlim,
                                    i32 klim, RowIndex row_index) {
  constexpr int kVecs = Rows * kTileK / 16;
  for (int v = threadIdx.x; v < kVecs; v += kThreads) {
    const int r = v / (kTileK / 16), kc = (v % (kTileK / 16)) * 16;
    const i32 gr = row_index(r);
    vec16 x = {0u, 0u, 0u, 0u};
    if (gr < rlim && k0 + kc < klim) x = ld16(g + i64(gr) * ld + k0 + kc);
    st16(s + r * MfmaMx::kLdS + kc, x);
  }
  for (int v = threadIdx.x; v < Rows * MfmaMx::kScalesPerRow; v += kThreads) {
    const int r = v / MfmaMx::kScalesPerRow, b = v % MfmaMx::kScalesPerRow;
    const i32 gr = row_index(r), kb = k0 / 32 + b;
    ss[v] = gr < rlim && kb * 32 < klim ? scales[i64(gr) * (ld / 32) + kb] : u8(127);
  }
}

// run_builder_arch's slab loop for MXFP8 x MXFP8 tiles (gfx950's block-scaled MFMA).
template <int L, class Sched>
KOSMOS_DEVICE void build_mx_slab(const Problem& p, const TileCoord& tc, i32 kb, u8* smem, MfmaMx& mma, bool computes,
                                 int warp, int lane) {
  static_assert(L == LAYOUT_TN && !Sched::kGroupedB, "MXFP8 x MXFP8 tiles: TN, one B");
  constexpr int LdS = MfmaMx::kLdS;
  u8* sA = smem;
  u8* sB = sA + kTileM * LdS;
  u8* sAs = sB + kTileN * LdS;
  u8* sBs = sAs + kTileM * MfmaMx::kScalesPerRow;
  const i32 k0 = tc.k_off + kb * kTileK;
  const u8* a = reinterpret_cast<const u8*>(p.a);
  const u8* b = reinterpret_cast<const u8*>(p.b);
  stage_mx_operand<kTileM>(sA, sAs, a, p.a_scales, p.lda, k0, tc.a_mlim, tc.k_end, [&](int r) { return tc.a_m0 + r; });
  stage_mx_operand<kTileN>(sB, sBs, b, p.b_scales, p.ldb, k0, p.no, tc.k_end,
                           [&](int r) { return b_chunk_col(p, tc.tn, r / 64) + r % 64; });
  __syncthreads();
  if (computes) mma.slab_mx(sA, sAs, sB, sBs, warp, lane);
  __syncthreads();
}
static_assert((kTileM + kTileN) * (MfmaMx::kLdS + MfmaMx::kScalesPerRow) + 128 <= kSmemBytesPortable,
              "the MXFP8 slabs must fit the portable layer's shared memory");
#endif

// Nothing lives across calls here: each call stages its own slabs synchronously.
KOSMOS_DEVICE void builder_init_arch(u8*) { __syncthreads(); }
KOSMOS_DEVICE u32 lendable_bytes_arch(u8*) { return u32(kSmemBytes); }  // the slabs: restaged every slab
KOSMOS_DEVICE void builder_reclaim_arch(u8*) { __syncthreads(); }

template <int L, class Sched, class Claim, class Ready, class Epi>
KOSMOS_DEVICE bool run_builder_arch(const Sched& sched, const TensorMap*, const TensorMap*, u8* smem_raw,
                                    Claim& claim, const Ready& ready, const Epi& epi) {
  static_assert(Sched::Tile::kTileN == kTileN, "the portable layers build 128x256 tiles only");
  const Problem& p = sched.p;
  constexpr int LdS = ArchMma::kLdS;
  u16* sA = reinterpret_cast<u16*>((reinterpret_cast<u64>(smem_raw) + 127) & ~u64(127));
  u16* sB = sA + kTileM * LdS;
  __shared__ i32 s_tile;
  __shared__ i32 s_ready;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const bool computes = warp < ArchMma::kComputeWarps;
#if KOSMOS_GEMM_MFMA
  MfmaMx mma;  // the Mfma layer, with its MXFP8 x MXFP8 slab
#else
  static_assert(!Sched::Tile::kMxB, "MXFP8 x MXFP8 tiles: gfx950's layer");
  ArchMma mma;
#endif
  for (;;) {
    if (threadIdx.x == 0) s_tile = claim();
    __syncthreads();
    const i32 t = s_tile;
    __syncthreads();
    if (t < 0) return true;
    const TileCoord tc = sched.tile(t);
    // Grouped B: this tile's group's matrix (kGroupedB schedules; group is 0 otherwise).
    const u16* b = p.b + (Sched::kGroupedB ? i64(tc.group) * p.b_group_stride : 0);
    mma.zero();
    for (i32 kb = tc.kb0; kb < tc.kb1; ++kb) {
      if (!Ready::kTrivial && kb == tc.kb0) {  // once per unit, as on the Hopper layer
        if (threadIdx.x == 0) s_ready = ready(tc, kb) ? 1 : 0;
        __syncthreads();
        if (!s_ready) return false;
      }
#if KOSMOS_GEMM_MFMA
      if constexpr (Sched::Tile::kMxB) {
        build_mx_slab<L, Sched>(p, tc, kb, reinterpret_cast<u8*>(sA), mma, computes, warp, lane);
        continue;
      }
#endif
      const i32 k0 = tc.k_off + kb * kTileK;
      // A: rows are the tile's M indices (zero at or past a_mlim); its reduction index runs to k_end.
      stage_operand<LayoutTraits<L>::kAKMajor, kTileM, LdS>(sA, p.a, p.lda, k0, tc.a_mlim, tc.k_end,
                                                            [&](int r) { return tc.a_m0 + r; });
      // B: rows are output columns mapped through b_chunk_col (SwiGLU gate/up halves).
      const i32 nlim = p.swiglu_f ? 2 * p.swiglu_f : p.no;
      stage_operand<LayoutTraits<L>::kBKMajor, kTileN, LdS>(
          sB, b, p.ldb, k0, nlim, tc.k_end, [&](int r) { return b_chunk_col(p, tc.tn, r / 64) + r % 64; });
      __syncthreads();
      if (computes) mma.slab(sA, sB, warp, lane);
      __syncthreads();
    }
    if (computes) mma.epilogue(tc, epi, warp, lane);
    if (Epi::kHasDone) {
      __syncthreads();
      if (threadIdx.x == 0) epi.done(tc);
    }
  }
}

// The jobs in order (nothing is traded between calls here: a job list is one call per job).
template <class Job, class... Rest>
KOSMOS_DEVICE bool run_builder_jobs(u8* smem, const Job& j, const Rest&... rest) {
  const bool ok = !j.on || run_builder_arch<Job::kLayout>(j.sched, j.tma, j.tmb, smem, j.claim, j.ready, j.epi);
  phase_mark(job_slot<int(sizeof...(Rest))>());
  if (!ok) return false;
  if constexpr (sizeof...(Rest) > 0) return run_builder_jobs(smem, rest...);
  return true;
}

// The side work first, by every thread (no warp idles here), then the jobs.
template <class Side, class Job, class... Rest>
KOSMOS_DEVICE bool run_builder_jobs_beside(u8* smem, const Side& side, const Job& j, const Rest&... rest) {
  side(int(threadIdx.x));
  return run_builder_jobs(smem, j, rest...);
}

}  // namespace gemm
}  // namespace kosmos
