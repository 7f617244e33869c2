// The Hopper builder: a warp-specialized, TMA-fed, mbarrier-pipelined wgmma tile loop.
//
// Threads 0..127 (warpgroup 0) are the producer: one thread claims tiles, runs the readiness
// hook and issues TMA loads into a kStages-deep ring of shared-memory stages. Warpgroups 1 and 2
// are consumers: each computes a 64-row half of the 128 x BN output tile with wgmma m64nBNk16
// (BN/2 fp32 accumulators per thread; the schedule's TileConfig fixes BN) and runs the epilogue.
// The producer writes the claimed unit (or -1 = no more work, -2 = aborted) into a per-stage slot
// before the stage's full barrier completes, so consumers learn the unit from the data stream and
// the producer can run ahead into the next tile while consumers finish the epilogue.
//
// The pipeline lives for the whole kernel: builder_init() initialises its mbarriers once, and the
// ring position (stage, phase) is kept in shared memory between calls, so a CTA can leave the
// builder (to move data) and come back without draining or re-initialising anything. Every stage
// the producer fills is released by the consumers, the stop stage included, so both sides leave a
// call at the same point of the ring: one position serves both. One tile configuration per kernel
// (or per run_builder_jobs call): the ring's stage count is the configuration's.
#pragma once
#include "config.h"
#include "epilogue.h"
#include "fragment.h"
#include "job.h"
#include "schedule.h"
#include "sm90_wgmma.h"
#include "../trace.h"
#include "../mx/dequant.h"

namespace kosmos {
namespace gemm {

// 128 x 56 + 256 x 224 = 64,512 of the SM's 65,536. The producer's idle warps push the MoE
// dispatch beside the builder (SideDispatch), 8 vectors a lane in flight at 56 registers (4 at 40).
// Measured against 40 / 232 (H100, notes/moe.md session 29): the fused backward at Qwen3-30B 2,048
// rows 2.5-2.7 % faster in two runs, small-M grouped GEMMs 0-4 %, the rest within noise.
constexpr int kProducerRegs = 56;
constexpr int kConsumerRegs = 224;
constexpr int kEntryRegs = 168;  // 65536 / 384 rounded down to a multiple of 8

// The ring's bookkeeping, in the kSmemBytes plan after the stages and the epilogue staging.
struct PipelineState {
  u64 full[kMaxStages];   // TMA bytes of the stage landed (count 1 + tx)
  u64 empty[kMaxStages];  // the consumers' 8 warps are done reading it (ping-pong: the owner's 4, 2 arrivals each)
  i32 slot[kMaxStages];   // the unit the stage belongs to, or -1 / -2
  u32 stage, phase;     // the ring position between calls: both sides end a call at the same one
  i32 aborted;         // a readiness hook failed: the kernel is on its way out
  // Ping-pong (consume_pingpong): where a consumer warpgroup's unit left the ring -- the next
  // unit's first stage and its phase -- and the stop it met there (0: none), for the other's turn.
  struct Handoff {
    u32 s, ph;
    i32 stop;
  } handoff[2];
};
static_assert(sizeof(PipelineState) <= 256, "the pipeline state must fit the 256 bytes kSmemBytes keeps for it");

KOSMOS_DEVICE u8* stage_base(u8* smem_raw) {
  return reinterpret_cast<u8*>((reinterpret_cast<u64>(smem_raw) + 1023) & ~u64(1023));
}
KOSMOS_DEVICE PipelineState* pipeline_of(u8* smem_raw) {
  return reinterpret_cast<PipelineState*>(stage_base(smem_raw) + kRingBytes + kEpiBytes);
}

// All threads, once per kernel, before the first run_builder_arch.
KOSMOS_DEVICE void builder_init_arch(u8* smem_raw) {
  PipelineState* ps = pipeline_of(smem_raw);
  // The shared memory may have held a mover's tables (generic writes) before it becomes the ring
  // the TMA writes: order those before any async-proxy access.
  sm90::fence_proxy_async_shared();
  if (threadIdx.x == 0) {
    for (int i = 0; i < kMaxStages; ++i) {  // every tile configuration's ring
      sm90::mbar_init(&ps->full[i], 1);
      sm90::mbar_init(&ps->empty[i], 8);  // one arrival per consumer warp (ping-pong: two per owner warp)
    }
    ps->stage = ps->phase = 0;
    ps->aborted = 0;
    sm90::mbar_fence_init();
  }
  __syncthreads();
}

// The stages and the epilogue staging, before the pipeline state: free between two builder calls.
KOSMOS_DEVICE u32 lendable_bytes_arch(u8* smem_raw) { return u32(reinterpret_cast<u8*>(pipeline_of(smem_raw)) - smem_raw); }

// All threads, after a loan of the stages (tile.h): its generic writes before the TMA's.
KOSMOS_DEVICE void builder_reclaim_arch(u8*) {
  sm90::fence_proxy_async_shared();
  __syncthreads();
}

// Where a side of the ring stands: the next stage and its phase parity. Kept in registers through
// a builder call, in the PipelineState between calls.
struct RingPos {
  u32 s, ph;
};

template <int Stages>
KOSMOS_DEVICE void ring_advance(u32& s, u32& ph) {
  if (++s == Stages) {
    s = 0;
    ph ^= 1;
  }
}

// Stream-K (StreamKSchedule): a K-range of a tail tile, its reduction in `acc`. A range other than
// the tile's last stores its partial (256 consumer threads x N floats, fragment order: the last
// range's threads hold the same elements) and counts it in arrived[tile]; returns false (no
// epilogue). The last range waits for the others, adds them to its own (ranges 0, 1, ... in turn:
// a fixed order, bitwise reproducible) and returns true: the epilogue stores the tile. Called by
// both consumer warpgroups (ctid 0..255). A K-range is never empty (the host keeps it so: an empty
// one would carry no stage and never count).
template <class Sched, int N>
KOSMOS_DEVICE bool stream_k_fixup(const Sched& sched, const TileCoord& tc, float (&acc)[N], int ctid) {
  using namespace sm90;
  const StreamK& sk = sched.sk;
  constexpr i64 kPartial = i64(N) * 256;
  static_assert(kPartial * 4 == kStreamKPartialBytes, "the host sizes the workspace by kStreamKPartialBytes");
  float* tile_ws = sk.ws + i64(tc.sk_tile) * (tc.sk_pieces - 1) * kPartial + ctid;
  if (tc.sk_rank < tc.sk_pieces - 1) {
    float* w = tile_ws + tc.sk_rank * kPartial;
#pragma unroll
    for (int i = 0; i < N; ++i) st_cg_f32(w + i * 256, acc[i]);
    named_barrier(1, 256);
    if (ctid == 0) {
      fence_acq_rel_dev();  // every consumer's stores (ordered before by the barrier), then the count
      atomic_add_relaxed_dev(&sk.arrived[tc.sk_tile], 1ull);
    }
    return false;
  }
  __shared__ int sk_ok;
  if (ctid == 0) {
    // The other ranges were claimed earlier and never wait, so this gives up only on a defect or
    // because the grid or a peer failed (a fused kernel's wait context): then the status names the
    // site (the host raises it) and the tile is stored as NaN, never as a silently partial sum.
    sk_ok = wait_flag_dev(sched.wait, SITE_GRID, &sk.arrived[tc.sk_tile], u64(tc.sk_pieces - 1)) ? 1 : 0;
    // Back to 0 for the next launch once this one's ranges have all counted: a subtraction, not a
    // store, so ranges that count after a wait that gave up leave no residue (the counters are
    // shared by every stream-K launch on the device).
    atomic_add_relaxed_dev(&sk.arrived[tc.sk_tile], u64(0) - u64(tc.sk_pieces - 1));
  }
  named_barrier(1, 256);
  // NaN added to every element on failure (an unconditional add: accumulators written in a
  // divergent branch cost 750 B of spills here)
  const float poison = sk_ok != 0 ? 0.f : __int_as_float(0x7fc00000);
  named_barrier(1, 256);  // everyone has read sk_ok before the next tile's last range writes it
  for (i32 r = 0; r < tc.sk_pieces - 1; ++r) {
    const float* w = tile_ws + r * kPartial;
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] += ld_cg_f32(w + i * 256);
  }
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] += poison;
  return true;
}

// ---- MXFP8 A (TileConfig::kMxA): the consumers dequantize A's codes into wgmma fragments ----
// Thread (warp, lane) of a consumer warpgroup holds rows g = lane / 4 and g + 8 of its warp's 16
// and, of each 64-code slab row, the 16 consecutive codes 16 q .. 16 q + 15, q = lane % 4 (one
// 16-byte shared load a row; a quarter warp reads two whole 64-byte rows: no bank conflict). The
// m64k16 fragment of wgmma step kk takes codes 4 kk .. 4 kk + 3 of them: codes 0, 1 at columns
// 2q, 2q + 1 and codes 2, 3 at 2q + 8, 2q + 9. So step kk's column c holds the slab's code
// 16 q + 4 kk + 2 h + b for c = 16 kk + 8 h + 2 q + b: B's rows of each slab are stored in that
// order (kosmos.mx.k_permutation), and the product is the GEMM's. The 16 codes share one scale
// block (32 codes): 2 q + ... stays inside block q / 2 of the slab.
struct MxFirst {
  i32 a_m0, kb0;  // the unit's first A row and first slab
};
struct MxScales {
  const u8* row0;  // the scales of the thread's rows g and g + 8 (clamped to the last row: rows
  const u8* row1;  // past it are zero codes from the TMA's fill, never stored)
  i32 block0;      // the thread's block in the unit's first slab
  i32 blocks;      // scales per row (kr / 32)
  // The scale code of slab i; 127 (2^0) past the row's last block (zero codes there: a NaN scale
  // would turn them into NaN). A plain load, not __ldg: in the fused AG kernels this GPU's movers
  // wrote these scales earlier in the same kernel, which the non-coherent path does not promise to see.
  KOSMOS_DEVICE u32 at(const u8* row, i32 i) const {
    const i32 b = block0 + 2 * i;
    return b < blocks ? u32(row[b]) : 127u;
  }
};
KOSMOS_DEVICE MxScales mx_scales_of(const Problem& p, const MxFirst& f, i32 tile_row, i32 q) {
  const i32 blocks = p.kr / 32, last = p.mo - 1;
  const i32 r0 = f.a_m0 + tile_row, r1 = r0 + 8;
  return MxScales{p.a_scales + i64(r0 < last ? r0 : last) * blocks, p.a_scales + i64(r1 < last ? r1 : last) * blocks,
                  2 * f.kb0 + q / 2, blocks};
}

// One slab of a consumer warpgroup: A's codes -> frag (16 registers: step kk's a[0..3] at 4 kk),
// then the four wgmma steps on B's stage at b0, committed as one group (the caller waits);
// seen0/seen1 AND-accumulate e4m3x4_nan_seen of the thread's codes of rows g and g + 8.
template <int kN, bool BK>
KOSMOS_DEVICE void consume_mx_slab(float* acc, u32* frag, const u8* stage, u32 b0, int cw, int warp, int lane,
                                   u32 s0, u32 s1, bool first, u32& seen0, u32& seen1) {
  using namespace sm90;
  const u32 row = smem_addr(stage) + (cw * 64 + warp * 16 + lane / 4) * kTileK + (lane % 4) * 16;
  const vec16 c0 = lds16(row), c1 = lds16(row + 8 * kTileK);
  const u32* w0 = &c0.x;
  const u32* w1 = &c1.x;
  // One multiply a pair where the whole warp's scales of this slab allow it (a warp-uniform
  // branch: the vote), else two; the same bits either way (dequant.h).
  if (__all_sync(0xffffffffu, (s0 > s1 ? s0 : s1) <= mx::kOneMultiplyMaxScale)) {
    const u32 k0 = mx::e8m0_one_multiply_bf16x2(s0), k1 = mx::e8m0_one_multiply_bf16x2(s1);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      mx::e4m3x4_to_bf16x4_one_multiply(w0[kk], k0, frag[4 * kk], frag[4 * kk + 2]);
      mx::e4m3x4_to_bf16x4_one_multiply(w1[kk], k1, frag[4 * kk + 1], frag[4 * kk + 3]);
    }
  } else {
    const u32 k0 = mx::e8m0_to_bf16x2(s0), k1 = mx::e8m0_to_bf16x2(s1);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      mx::e4m3x4_to_bf16x4_scaled(w0[kk], k0, frag[4 * kk], frag[4 * kk + 2]);
      mx::e4m3x4_to_bf16x4_scaled(w1[kk], k1, frag[4 * kk + 1], frag[4 * kk + 3]);
    }
  }
  // NaN codes are watched, not decoded (the conversion reads them as finite): mx_nan_rows
#pragma unroll
  for (int kk = 0; kk < 4; kk += 2) {
    seen0 &= mx::e4m3x4_nan_seen(w0[kk]) & mx::e4m3x4_nan_seen(w0[kk + 1]);
    seen1 &= mx::e4m3x4_nan_seen(w1[kk]) & mx::e4m3x4_nan_seen(w1[kk + 1]);
  }
  wgmma_fence();  // the fragments were written by ordinary instructions
#pragma unroll
  for (int kk = 0; kk < kTileK / 16; ++kk) {
    const u64 db = BK ? make_desc(b0 + kk * 32, 16, 1024) : make_desc(b0 + kk * 2048, kBoxBytes, 1024);
    wgmma_tile_rs<kN, BK ? 0 : 1>(acc, frag + 4 * kk, db, (!first || kk > 0) ? 1u : 0u);
  }
  wgmma_commit();
}

// A NaN code anywhere in an A row makes the whole output row NaN (NaN x anything, 0 included):
// applied once a unit, after its last wgmma, from the AND of e4m3x4_nan_seen over the row's codes
// (the quad's four lanes read a row's K in four parts). Selects, not a branch: wgmma registers
// written in a divergent path serialize every wgmma of the kernel.
template <int kAcc>
KOSMOS_DEVICE void mx_nan_rows(float* acc, u32 seen0, u32 seen1) {
  seen0 &= __shfl_xor_sync(0xffffffffu, seen0, 1);
  seen0 &= __shfl_xor_sync(0xffffffffu, seen0, 2);
  seen1 &= __shfl_xor_sync(0xffffffffu, seen1, 1);
  seen1 &= __shfl_xor_sync(0xffffffffu, seen1, 2);
  const bool nan0 = mx::e4m3_nan_in(seen0), nan1 = mx::e4m3_nan_in(seen1);
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = ((i & 2) ? nan1 : nan0) ? __int_as_float(0x7fc00000) : acc[i];
}

// A unit whose output rows all lie in its first 64 (a ragged group's last rows, a GEMM's last
// tile row): the second consumer warpgroup's rows are none of the output's, so it runs no MMA and
// the TMA brings no A rows for it (it still walks the ring). Not for ragged-K units (their
// last-slab zeroing is both warpgroups' work) nor MXFP8 A (one 128-row codes box). Measured
// (session 17, notes/gemm.md): skewed grouped GEMMs +1.5-3.6 %, a 320-row GEMM +12 %.
template <class Cfg, class Sched>
KOSMOS_DEVICE bool one_warpgroup_rows(const TileCoord& tc) {
  return !Cfg::kMxA && !Cfg::kPingPong && !Sched::kRaggedK && tc.row_end - tc.row0 <= 64;
}

// A ragged group's last slab (kRaggedK): TMA loaded 64 rows, the rows past the group's end belong
// to the next group. Zero them in both operands (0 x Inf would be NaN) before any wgmma reads:
// `threads` consumer threads (ctid 0..threads-1), then their named barrier `bar`.
template <class Cfg>
KOSMOS_DEVICE void zero_rows_past(u8* stage, i32 valid, int ctid, int threads, u32 bar) {
  using namespace sm90;
  const i32 chunks = (kTileK - valid) * 8;  // 16-byte chunks per 64x64 box
  for (i32 c = ctid; c < (2 + Cfg::kBoxesB) * chunks; c += threads) {
    const i32 box = c / chunks, r = valid + (c % chunks) / 8;
    st16(stage + box * kBoxBytes + r * 128 + (c % 8) * 16, vec16{0u, 0u, 0u, 0u});
  }
  fence_proxy_async_shared();
  named_barrier(bar, threads);
}

// The TMA-store epilogue of one consumer warpgroup: kHalves m64 x kN accumulator fragments (kN / 2
// floats a thread each: the cooperative tile's one, a ping-pong tile's two, rows 64 h on) stored
// through shared memory in subtiles of 64 rows x 128 bytes (64 bf16 or 32 fp32 columns) and
// kSlots 8 KB slots at ebuf: with two, subtile q is written into slot q % 2 while the TMA store of
// subtile q-1 still reads the other slot; with one (the 192-wide tile's 5th stage took the other),
// after it has read it. The slots hold the TMA's 128-byte swizzle (16-byte chunk ^= row % 8),
// which also keeps the fragment's 8-row stores free of bank conflicts. `bar`: the warpgroup's
// named barrier; map_row: the output map's row of the fragments' first row.
template <int kN, int kHalves, int kSlots, class Epi>
KOSMOS_DEVICE void store_through_tma(const Epi& epi, const TileCoord& tc, const float* acc, u8* ebuf, i32 map_row,
                                     int tid, int warp, int lane, u32 bar) {
  using namespace sm90;
  constexpr int kEB = Epi::kTmaElemBytes;
  constexpr int kBoxCols = 128 / kEB, kN8 = kBoxCols / 8;  // columns and n8 blocks per subtile
  constexpr int kSub = kN / kBoxCols;                      // subtiles per fragment
  const int r0 = warp * 16 + lane / 4;
#pragma unroll
  for (int h = 0; h < kHalves; ++h) {
#pragma unroll
    for (int q = 0; q < kSub; ++q) {
      const int g = h * kSub + q;
      u8* slot_q = ebuf + (g % kSlots) * kBoxBytes;
      // the store that last used this slot has read it: the one before the newest, except with
      // one slot and at a tile's first subtile after an odd count of them (bf16 192 columns: 3),
      // whose last store used slot 0 too (it matters where two epilogues meet with no mainloop
      // between: an empty group's zero tile)
      if (tid == 0) {
        if (kSlots == 1 || (g == 0 && (kHalves * kSub) % 2 == 1)) bulk_wait_read_all();
        else bulk_wait_read_but_one();
      }
      named_barrier(bar, 128);
#pragma unroll
      for (int jj = 0; jj < kN8; ++jj) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int r = r0 + 8 * i;
          const int a = h * (kN / 2) + 4 * (kN8 * q + jj) + 2 * i;
          if constexpr (Epi::kTransposed) {  // slot row = the subtile's column, 2 bytes a store
            static_assert(kEB == 2, "the transposed store is bf16's");
            const u32 v = pack_bf16x2(acc[a], acc[a + 1]);
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int c = 8 * jj + 2 * (lane % 4) + e;
              *reinterpret_cast<u16*>(slot_q + c * 128 + (((r / 8) ^ (c % 8)) * 16) + (r % 8) * 2) = u16(v >> (16 * e));
            }
          } else if constexpr (kEB == 2) {  // an n8 block is one 16-byte chunk, 4 bytes a lane
            *reinterpret_cast<u32*>(slot_q + r * 128 + ((jj ^ (r % 8)) * 16) + (lane % 4) * 4) =
                pack_bf16x2(acc[a], acc[a + 1]);
          } else {  // two chunks, 8 bytes a lane
            const int chunk = 2 * jj + (lane % 4) / 2;
            *reinterpret_cast<float2*>(slot_q + r * 128 + ((chunk ^ (r % 8)) * 16) + (lane % 2) * 8) =
                make_float2(acc[a], acc[a + 1]);
          }
        }
      }
      fence_proxy_async_shared();
      named_barrier(bar, 128);
      if (tid == 0) {
        const i32 row = map_row + 64 * h, col = tc.col0 + kBoxCols * q;
        if constexpr (Epi::kReduceAdd) tma_reduce_add_2d(epi.map, slot_q, col, row);
        else if constexpr (Epi::kTransposed) tma_store_2d(epi.map, slot_q, row, col);
        else tma_store_2d(epi.map, slot_q, col, row);
        bulk_commit();
      }
    }
  }
  if (Epi::kHasDone && tid == 0) bulk_wait_all();
}

// The producer's half of a call, thread 0 alone: claims units, runs the readiness hook, issues
// the TMA loads and writes each stage's slot. Returns false when a hook aborted.
template <class Job>
KOSMOS_DEVICE bool produce(const Job& job, u8* smem_raw, RingPos& pos) {
  using namespace sm90;
  constexpr int L = Job::kLayout;
  typedef typename Job::Sched Sched;
  const Sched& sched = job.sched;
  const TensorMap* tma = job.tma;
  const TensorMap* tmb = job.tmb;
  typedef typename Sched::Tile Cfg;
  constexpr int kN = Cfg::kTileN;
  constexpr bool AK = LayoutTraits<L>::kAKMajor;
  constexpr bool BK = LayoutTraits<L>::kBKMajor;
  const Problem& p = sched.p;
  u8* base = stage_base(smem_raw);
  PipelineState* ps = pipeline_of(smem_raw);
  u64* full = ps->full;
  u64* empty = ps->empty;
  i32* slot = ps->slot;
  tma_prefetch_desc(tma);
  tma_prefetch_desc(tmb);
  u32 s = pos.s, ph = pos.ph;
  for (;;) {
    const i32 t = job.claim();
    i32 stop = t < 0 ? -1 : 0;
    TileCoord tc;
    if (t >= 0) tc = sched.tile(t);  // (no tile 0 to place when every group is empty)
    else tc.kb0 = tc.kb1 = 0;
    // The hook runs once, before the unit's first slab: the consumers learn a stop only at a
    // unit's first stage (a stop between two slabs would leave them waiting for the next one).
    if (stop == 0 && !job.ready(tc, tc.kb0)) stop = -2;
    // A stage without loads carries only its slot: the stop (-1 no more tiles, -2 abort; the
    // consumers release it too), or a unit with nothing to reduce (a group without rows).
    if (stop != 0 || (Sched::kRaggedK && tc.kb1 == tc.kb0)) {
      mbar_wait(&empty[s], ph ^ 1);
      slot[s] = stop != 0 ? stop : t;
      mbar_arrive(&full[s]);
      ring_advance<Cfg::kStages>(s, ph);
      if (stop == 0) continue;
      if (stop == -2) ps->aborted = 1;
      break;
    }
    if (!Job::Ready::kTrivial) fence_proxy_async_global();
    const bool half = one_warpgroup_rows<Cfg, Sched>(tc);  // A's second 64-row box is not read
    for (i32 kb = tc.kb0; kb < tc.kb1; ++kb) {
      mbar_wait(&empty[s], ph ^ 1);
      slot[s] = t;
      mbar_arrive_expect_tx(&full[s], Cfg::kTxBytes - (half ? kBoxBytes : 0));
      u8* sa = base + s * Cfg::kStageBytes;
      u8* sb = sa + Cfg::kStageBytesA;
      const i32 k = tc.k_off + kb * kTileK;
      if constexpr (Cfg::kMxA) {
        tma_load_2d(sa, tma, k, tc.a_m0, &full[s]);  // one box: 128 rows x 64 codes
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (h == 1 && half) break;
          const i32 mn = tc.a_m0 + 64 * h;
          if (AK) tma_load_2d(sa + h * kBoxBytes, tma, k, mn, &full[s]);
          else tma_load_2d(sa + h * kBoxBytes, tma, mn, k, &full[s]);
        }
      }
#pragma unroll
      for (int c = 0; c < Cfg::kBoxesB; ++c) {
        const i32 col = b_chunk_col<kN>(p, tc.tn, c);
        if constexpr (Sched::kGroupedB) {
          if (BK) tma_load_3d(sb + c * kBoxBytes, tmb, k, col, tc.group, &full[s]);
          else tma_load_3d(sb + c * kBoxBytes, tmb, col, k, tc.group, &full[s]);
        } else {
          if (BK) tma_load_2d(sb + c * kBoxBytes, tmb, k, col, &full[s]);
          else tma_load_2d(sb + c * kBoxBytes, tmb, col, k, &full[s]);
        }
      }
      ring_advance<Cfg::kStages>(s, ph);
    }
  }
  pos = RingPos{s, ph};
  return ps->aborted == 0;
}

// The consumers' half of a call (warpgroups 1 and 2): the wgmma mainloop and the epilogue of
// every unit the producer's slots name, until a stop slot. Returns false on an abort (-2).
template <class Job>
KOSMOS_DEVICE bool consume(const Job& job, u8* smem_raw, RingPos& pos) {
  using namespace sm90;
  constexpr int L = Job::kLayout;
  typedef typename Job::Sched Sched;
  typedef typename Job::Epi Epi;
  const Sched& sched = job.sched;
  const Epi& epi = job.epi;
  typedef typename Sched::Tile Cfg;
  constexpr int kN = Cfg::kTileN;
  constexpr bool AK = LayoutTraits<L>::kAKMajor;
  constexpr bool BK = LayoutTraits<L>::kBKMajor;
  u8* base = stage_base(smem_raw);
  u8* epi_smem = base + Cfg::kEpiOffset;  // Cfg::kEpiSlots 8 KB slots per consumer warpgroup
  PipelineState* ps = pipeline_of(smem_raw);
  u64* full = ps->full;
  u64* empty = ps->empty;
  i32* slot = ps->slot;
  const int wg = threadIdx.x / 128;
  const int cw = wg - 1;
  const int tid = threadIdx.x - 128 * wg;
  const int warp = tid / 32, lane = tid % 32;
  // Defined here (the first wgmma of a unit overwrites them anyway): left undefined, their value
  // would flow around a caller's loop (two-way AG) and the compiler keeps all 128 live, spilled,
  // through the mover code between calls (measured: the AG kernels 7x slower).
  float acc[Cfg::kAcc];
#pragma unroll
  for (int i = 0; i < Cfg::kAcc; ++i) acc[i] = 0.f;
  u32 s = pos.s, ph = pos.ph;
  i32 stop;
  tile_mark(-1, 0);
  for (int unit = 0;; ++unit) {
    mbar_wait(&full[s], ph);
    const i32 t = slot[s];
    if (t < 0) {
      if (lane == 0) mbar_arrive(&empty[s]);
      ring_advance<Cfg::kStages>(s, ph);
      stop = t;
      break;
    }
    tile_mark(unit, 0);
    // Only the slab count (and, ragged, the reduction rows left) stay live across the mainloop;
    // the tile is placed again for the epilogue: registers the wgmma pipeline needs otherwise.
    i32 nslabs, k_left, busy;  // busy: the slabs this warpgroup multiplies (0: one_warpgroup_rows)
    MxFirst mx_first;  // (MXFP8 A only: its scales' first row and slab, and the NaN-code watch)
    u32 mx_seen0 = ~0u, mx_seen1 = ~0u;
    {
      const TileCoord t0 = sched.tile(t);
      nslabs = t0.kb1 - t0.kb0;
      busy = cw == 1 && one_warpgroup_rows<Cfg, Sched>(t0) ? 0 : nslabs;
      k_left = t0.k_end - (t0.k_off + t0.kb0 * kTileK);
      mx_first = MxFirst{t0.a_m0, t0.kb0};
    }
    if constexpr (Sched::kRaggedK) {
      // Only ragged schedules have units with nothing to reduce (a group without rows). The
      // accumulators are zeroed on every unit, not on that path alone: wgmma registers written in
      // a divergent path make ptxas serialize every wgmma of the kernel.
#pragma unroll
      for (int i = 0; i < Cfg::kAcc; ++i) acc[i] = 0.f;
      if (nslabs == 0) {
        if (lane == 0) mbar_arrive(&empty[s]);
        ring_advance<Cfg::kStages>(s, ph);
      }
    }
    int prev = -1;
    if constexpr (Cfg::kMxA) {
      static_assert(AK && !Sched::kRaggedK && !Sched::kGroupedB, "MXFP8 A: K-major, one dense GEMM");
      // Two fragment sets, slabs alternating: slab i's conversion writes the set whose wgmmas
      // (slab i - 2's) the wait<1> of slab i - 1 has retired, while slab i - 1's still run.
      u32 frag_even[16], frag_odd[16];
      MxScales sc = mx_scales_of(sched.p, mx_first, cw * 64 + warp * 16 + lane / 4, lane % 4);
      u32 s_next0 = sc.at(sc.row0, 0), s_next1 = sc.at(sc.row1, 0);
      for (i32 i = 0; i < nslabs; ++i) {
        if (i > 0) mbar_wait(&full[s], ph);
        const u32 s0 = s_next0, s1 = s_next1;
        s_next0 = sc.at(sc.row0, i + 1);  // a slab ahead: the loads' latency under this slab's MMA
        s_next1 = sc.at(sc.row1, i + 1);
        u8* stage = base + s * Cfg::kStageBytes;
        const u32 b0 = smem_addr(stage + Cfg::kStageBytesA);
        if ((i & 1) == 0) consume_mx_slab<kN, BK>(acc, frag_even, stage, b0, cw, warp, lane, s0, s1, i == 0, mx_seen0, mx_seen1);
        else consume_mx_slab<kN, BK>(acc, frag_odd, stage, b0, cw, warp, lane, s0, s1, false, mx_seen0, mx_seen1);
        wgmma_wait<1>();
        fence_regs<Cfg::kAcc>(acc);
        if (prev >= 0 && lane == 0) mbar_arrive(&empty[prev]);
        prev = int(s);
        ring_advance<Cfg::kStages>(s, ph);
      }
    } else {
      // An idle warpgroup's accumulators keep the last unit's values: only rows past row_end, never
      // stored (a trip count, not a branch around the wgmmas: ptxas serializes those).
      for (i32 i = 0; i < busy; ++i) {
        if (i > 0) mbar_wait(&full[s], ph);
        u8* stage = base + s * Cfg::kStageBytes;
        if constexpr (Sched::kRaggedK) {
          const i32 valid = k_left - i * kTileK;
          if (valid < kTileK) zero_rows_past<Cfg>(stage, valid, tid + 128 * cw, 256, 1);
        }
        const u32 a0 = smem_addr(stage + cw * kBoxBytes);
        const u32 b0 = smem_addr(stage + Cfg::kStageBytesA);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kTileK / 16; ++kk) {
          const u64 da = AK ? make_desc(a0 + kk * 32, 16, 1024) : make_desc(a0 + kk * 2048, kBoxBytes, 1024);
          const u64 db = BK ? make_desc(b0 + kk * 32, 16, 1024) : make_desc(b0 + kk * 2048, kBoxBytes, 1024);
          wgmma_tile<kN, AK ? 0 : 1, BK ? 0 : 1>(acc, da, db, (i > 0 || kk > 0) ? 1u : 0u);
        }
        wgmma_commit();
        wgmma_wait<1>();
        fence_regs<Cfg::kAcc>(acc);
        if (prev >= 0 && lane == 0) mbar_arrive(&empty[prev]);
        prev = int(s);
        ring_advance<Cfg::kStages>(s, ph);
      }
      for (i32 i = busy; i < nslabs; ++i) {  // idle: the stages are released as they land
        if (i > 0) mbar_wait(&full[s], ph);
        if (lane == 0) mbar_arrive(&empty[s]);
        ring_advance<Cfg::kStages>(s, ph);
      }
    }
    wgmma_wait<0>();
    fence_regs<Cfg::kAcc>(acc);
    if (prev >= 0 && lane == 0) mbar_arrive(&empty[prev]);
    if constexpr (Cfg::kMxA) mx_nan_rows<Cfg::kAcc>(acc, mx_seen0, mx_seen1);
    const TileCoord tc = sched.tile(t);
    if constexpr (Sched::kStreamK) {
      if (tc.sk_pieces > 1 && !stream_k_fixup(sched, tc, acc, tid + 128 * cw)) continue;
    }
    bool stored = false;
    if constexpr (Epi::kTmaStore) {
      if (!Sched::kMaskedRows || !tc.masked) {
        stored = true;
        store_through_tma<kN, 1, Cfg::kEpiSlots>(epi, tc, acc, epi_smem + cw * Cfg::kEpiSlots * kBoxBytes,
                                                 epi.tma_row(tc) + cw * 64, tid, warp, lane, 2 + cw);
      }
    }
    bool from_registers = !stored;
    // a quad epilogue shuffles: a vote tells the compiler every lane takes the same side (else it
    // guards each shuffle against divergence; the vote itself costs the others registers)
    if constexpr (Epi::kQuadStores) from_registers = __all_sync(0xffffffffu, from_registers);
    if (from_registers) {
      // Epilogue from registers (also every tile whose rows end inside the output).
      fragment_pairs<kN>(epi, tc, tc.row0 + cw * 64 + warp * 16 + lane / 4, 2 * (lane % 4), acc);
    }
    if (Epi::kHasDone) {
      named_barrier(1, 256);
      if (tid == 0 && cw == 0) epi.done(tc);
    }
    tile_mark(unit, 1);
  }
  if (Epi::kTmaStore && tid == 0) bulk_wait_all();  // shared memory stays ours until the stores are done
  pos = RingPos{s, ph};
  return stop == -1;
}

// ---- ping-pong consumers (TileConfig::kPingPong) ----
// Each consumer warpgroup owns whole 128 x 128 tiles: unit j of a builder job is warpgroup j % 2's.
// A warpgroup's turn starts where the other's unit left the ring and hands the ring on once its own
// unit's last stage has landed, so the other's mainloop runs under this one's drain and epilogue
// (the producer fills the ring in unit order: the tensor cores pass from one to the other). The
// hand-over also keeps every mbarrier parity wait at most one phase ahead of its barrier, which a
// warpgroup that skipped the other's stages by count alone could not know. Named barrier 5 + w:
// warpgroup w's turn (w bar.syncs, the other bar.arrives, 256 threads).
KOSMOS_DEVICE void pingpong_pass(PipelineState* ps, int cw, int tid, u32 s, u32 ph, i32 stop) {
  if (tid == 0) ps->handoff[cw] = PipelineState::Handoff{s, ph, stop};
  __syncwarp();
  sm90::named_barrier_arrive(5 + (1 - cw), 256);
}
KOSMOS_DEVICE void pingpong_take(const PipelineState* ps, int cw, u32& s, u32& ph, i32& stop) {
  __syncwarp();  // (bar.sync is .aligned; thread-0 sections come before: stores, epi.done)
  sm90::named_barrier(5 + cw, 256);
  const PipelineState::Handoff h = ps->handoff[1 - cw];
  s = h.s;
  ph = h.ph;
  stop = h.stop;
}

// consume() for ping-pong tiles: a consumer warpgroup's units of a job, until one of the two meets
// the stop slot (the one whose turn it is releases that stage, for both). Stages are released by
// the owner's 4 warps, 2 arrivals each (the empty barriers count 8: one init for every
// configuration). Not with stream-K (partials in the cooperative fragment's order), MXFP8 A or
// SwiGLU (256-wide tiles); the ragged-K zeroing is the owner's 128 threads'.
template <class Job>
KOSMOS_DEVICE bool consume_pingpong(const Job& job, u8* smem_raw, RingPos& pos) {
  using namespace sm90;
  constexpr int L = Job::kLayout;
  typedef typename Job::Sched Sched;
  typedef typename Job::Epi Epi;
  typedef typename Sched::Tile Cfg;
  static_assert(Cfg::kPingPong && !Sched::kStreamK, "ping-pong: its tile configuration, no stream-K");
  const Sched& sched = job.sched;
  const Epi& epi = job.epi;
  constexpr int kN = Cfg::kTileN;
  constexpr bool AK = LayoutTraits<L>::kAKMajor;
  constexpr bool BK = LayoutTraits<L>::kBKMajor;
  u8* base = stage_base(smem_raw);
  PipelineState* ps = pipeline_of(smem_raw);
  u64* full = ps->full;
  u64* empty = ps->empty;
  const i32* slot = ps->slot;
  const int wg = threadIdx.x / 128;
  const int cw = wg - 1;
  const int tid = threadIdx.x - 128 * wg;
  const int warp = tid / 32, lane = tid % 32;
  u8* ebuf = base + Cfg::kEpiOffset + cw * Cfg::kEpiSlots * kBoxBytes;
  float acc[Cfg::kAcc];  // rows 0-63 of the tile in acc[0, kN / 2), rows 64-127 after them
#pragma unroll
  for (int i = 0; i < Cfg::kAcc; ++i) acc[i] = 0.f;
  u32 s = pos.s, ph = pos.ph;
  i32 stop = 0;
  tile_mark(-1, 0);
  if (cw == 1) pingpong_take(ps, cw, s, ph, stop);  // unit 0 of the job is warpgroup 0's
  for (int unit = 0; stop == 0; ++unit) {
    mbar_wait(&full[s], ph);
    const i32 t = slot[s];
    if (t < 0) {
      if (lane == 0) mbar_arrive(&empty[s], 2u);
      ring_advance<Cfg::kStages>(s, ph);
      pingpong_pass(ps, cw, tid, s, ph, t);
      stop = t;
      break;
    }
    tile_mark(unit, 0);
    i32 nslabs, k_left;
    {
      const TileCoord t0 = sched.tile(t);
      nslabs = t0.kb1 - t0.kb0;
      k_left = t0.k_end - (t0.k_off + t0.kb0 * kTileK);
    }
    if constexpr (Sched::kRaggedK) {  // (see consume: zeroed on every unit, not in a branch)
#pragma unroll
      for (int i = 0; i < Cfg::kAcc; ++i) acc[i] = 0.f;
      if (nslabs == 0) {  // a unit with nothing to reduce carries one stage
        if (lane == 0) mbar_arrive(&empty[s], 2u);
        ring_advance<Cfg::kStages>(s, ph);
      }
    }
    int prev = -1;
    for (i32 i = 0; i < nslabs; ++i) {
      if (i > 0) mbar_wait(&full[s], ph);
      u8* stage = base + s * Cfg::kStageBytes;
      if constexpr (Sched::kRaggedK) {
        const i32 valid = k_left - i * kTileK;
        if (valid < kTileK) zero_rows_past<Cfg>(stage, valid, tid, 128, 2 + cw);
      }
      const u32 a0 = smem_addr(stage);
      const u32 b0 = smem_addr(stage + Cfg::kStageBytesA);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kTileK / 16; ++kk) {
        const u64 db = BK ? make_desc(b0 + kk * 32, 16, 1024) : make_desc(b0 + kk * 2048, kBoxBytes, 1024);
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // the tile's two 64-row halves: A's two boxes
          const u32 ah = a0 + h * kBoxBytes;
          const u64 da = AK ? make_desc(ah + kk * 32, 16, 1024) : make_desc(ah + kk * 2048, kBoxBytes, 1024);
          wgmma_tile<kN, AK ? 0 : 1, BK ? 0 : 1>(acc + h * (kN / 2), da, db, (i > 0 || kk > 0) ? 1u : 0u);
        }
      }
      wgmma_commit();
      wgmma_wait<1>();
      fence_regs<Cfg::kAcc>(acc);
      if (prev >= 0 && lane == 0) mbar_arrive(&empty[prev], 2u);
      prev = int(s);
      ring_advance<Cfg::kStages>(s, ph);
    }
    pingpong_pass(ps, cw, tid, s, ph, 0);  // every stage of the unit has landed: the other's turn
    wgmma_wait<0>();
    fence_regs<Cfg::kAcc>(acc);
    if (prev >= 0 && lane == 0) mbar_arrive(&empty[prev], 2u);
    const TileCoord tc = sched.tile(t);
    bool stored = false;
    if constexpr (Epi::kTmaStore) {
      if (!Sched::kMaskedRows || !tc.masked) {
        stored = true;
        store_through_tma<kN, 2, Cfg::kEpiSlots>(epi, tc, acc, ebuf, epi.tma_row(tc), tid, warp, lane, 2 + cw);
      }
    }
    bool from_registers = !stored;
    if constexpr (Epi::kQuadStores) from_registers = __all_sync(0xffffffffu, from_registers);
    if (from_registers) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        fragment_pairs<kN>(epi, tc, tc.row0 + h * 64 + warp * 16 + lane / 4, 2 * (lane % 4), acc + h * (kN / 2));
      }
    }
    if (Epi::kHasDone) {
      named_barrier(2 + cw, 128);
      if (tid == 0) epi.done(tc);
    }
    tile_mark(unit, 1);
    pingpong_take(ps, cw, s, ph, stop);
  }
  if (Epi::kTmaStore && tid == 0) bulk_wait_all();  // shared memory stays ours until the stores are done
  // Both warpgroups leave the job together: else the one that met the stop could start the next
  // ping-pong job of the call (its unit 0, a pass) before the other has taken this job's stop
  // from handoff[] (a second arrival on its barrier: a hang, or a stop read as a unit).
  __syncwarp();
  named_barrier(1, 256);
  pos = RingPos{s, ph};
  return stop == -1;
}

// A copy beside the builder (the experiment toward movers inside builder CTAs: notes/moe.md,
// session 14): `bytes` from src to dst in 16-byte vectors, chunks of kChunk bytes claimed by each
// warp from a grid-wide cursor (the kernel resets it). 4 vectors in flight a lane.
struct SideCopy {
  static constexpr u32 kVecs = 4;
  static constexpr u64 kChunk = 32 * kVecs * 16;  // a warp's 2 KB
  const u8* src;
  u8* dst;
  u64 bytes;    // a multiple of 16
  u64* cursor;  // chunks claimed in this launch
  KOSMOS_DEVICE void operator()(int t) const {
    const int lane = t % 32;
    const u64 chunks = (bytes + kChunk - 1) / kChunk;
    for (;;) {
      u64 ch = 0;
      if (lane == 0) ch = atomic_add_relaxed_dev(cursor, 1ull);
      ch = __shfl_sync(0xffffffffu, ch, 0);
      if (ch >= chunks) break;
      vec16 v[kVecs];
#pragma unroll
      for (u32 u = 0; u < kVecs; ++u) {
        const u64 off = ch * kChunk + (u * 32 + lane) * 16;
        if (off < bytes) v[u] = *reinterpret_cast<const vec16*>(src + off);
      }
#pragma unroll
      for (u32 u = 0; u < kVecs; ++u) {
        const u64 off = ch * kChunk + (u * 32 + lane) * 16;
        if (off < bytes) *reinterpret_cast<vec16*>(dst + off) = v[u];
      }
    }
  }
};
static_assert(sizeof(SideCopy) == 32, "SideCopy: see SIDE_COPY_DTYPE in kosmos/gemm.py");

// A builder call by the whole CTA: the producer warpgroup runs produce() (thread 0), the consumer
// warpgroups consume(). The warpgroups trade registers (setmaxnreg: kProducerRegs, kConsumerRegs)
// for the call and give them back at its end.
// Each side's walk over the jobs in order: a job that is off is skipped, and after an aborted one
// the rest are (both sides see the same slots, so they skip alike).
template <class Job, class... Rest>
KOSMOS_DEVICE bool produce_jobs(u8* smem, RingPos& pos, const Job& job, const Rest&... rest) {
  if (job.on && !produce(job, smem, pos)) return false;
  if constexpr (sizeof...(Rest) > 0) return produce_jobs(smem, pos, rest...);
  return true;
}
template <class Job, class... Rest>
KOSMOS_DEVICE bool consume_jobs(u8* smem, RingPos& pos, const Job& job, const Rest&... rest) {
  bool ok = true;
  if (job.on) {
    if constexpr (Job::Sched::Tile::kPingPong) ok = consume_pingpong(job, smem, pos);
    else ok = consume(job, smem, pos);
  }
  phase_mark(job_slot<int(sizeof...(Rest))>(), 128);  // the first consumer thread
  if (!ok) return false;
  if constexpr (sizeof...(Rest) > 0) return consume_jobs(smem, pos, rest...);
  return true;
}

// Runs the jobs (job.h) in order in one builder call, one register trade: the consumers go from
// one job's last tile to the next job's first without a CTA barrier; `side` runs beside them on the
// producer's idle warps (the call ends when both are done). Returns false when a readiness hook aborted.
template <class Side, class Job, class... Rest>
KOSMOS_DEVICE bool run_builder_jobs_beside(u8* smem_raw, const Side& side, const Job& job, const Rest&... rest) {
  using namespace sm90;
  static_assert(((Rest::Sched::Tile::kStages == Job::Sched::Tile::kStages &&
                  Rest::Sched::Tile::kStageBytes == Job::Sched::Tile::kStageBytes) && ...),
                "the ring's position carries from one job to the next: one stage count and size for all");
  PipelineState* ps = pipeline_of(smem_raw);
  const int wg = threadIdx.x / 128;
  // setmaxnreg and bar.sync are .aligned: every thread of a warp executes them together. The
  // __syncwarp()s before them reconverge what a caller or a thread-0 section left diverged (a
  // partial warp's setmaxnreg is undefined; without the one before barrier 4, the MoE forward hung).
  __syncwarp();
  // Where this call starts in the ring, read by every thread before barrier 4 (the consumers arrive
  // there); the producer's thread 0 stores where it ends only after that barrier. (Both sides end
  // a call at the same stage: every stage the producer fills, the stop stages included, the
  // consumers release.) Storing it before every warp had read it hung the MoE forward: in a call
  // whose jobs all met the stop at once, a consumer warp still held in its .inc read the new
  // position and waited for ever one stage past the stop (one call in 50-800 wherever a register
  // trade made the consumer warps start apart; notes/moe.md, sessions 11-12).
  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs>();
    RingPos pos{0, 0};
    if (threadIdx.x == 0) {
      pos = RingPos{ps->stage, ps->phase};
      produce_jobs(smem_raw, pos, job, rest...);
    } else if (threadIdx.x >= 32) {
      side(int(threadIdx.x) - 32);
    }
    // Back to the entry count inside this branch, so both warpgroups reach the join below with the
    // same register count: an .inc after the join gave ptxas a join of 40- and 168-register paths
    // (the producer had 40 then), and it spilled what callers keep live across the call to fit 40
    // (the TP kernels: 264-628 B of spills, then 0-268). Barrier 4 is the PTX rule between two
    // setmaxnreg of this warpgroup, and more: the consumers arrive at it once they have read the
    // start position and their .inc has its registers, so the position stored below is read by
    // nobody in this call, and this .inc can only take registers the consumers' .dec gives back
    // (else a producer that met the stop at once could take back the registers it had just freed,
    // and the consumers' .inc would wait for ever).
    __syncwarp();
    named_barrier(4, 384);
    if (threadIdx.x == 0) {
      ps->stage = pos.s;
      ps->phase = pos.ph;
    }
    setmaxnreg_inc<kEntryRegs>();
  } else {
    setmaxnreg_inc<kConsumerRegs>();
    RingPos pos{ps->stage, ps->phase};
    named_barrier_arrive(4, 384);  // read the start position, hold the consumer registers (barrier 4 above)
    consume_jobs(smem_raw, pos, job, rest...);
    // PTX: between two setmaxnreg of a warpgroup its warps must synchronize explicitly. A
    // warpgroup that built no tile (it saw the stop first) met no barrier since its .inc above.
    __syncwarp();
    (wg == 1 ? named_barrier(2, 128) : named_barrier(3, 128));
    setmaxnreg_dec<kEntryRegs>();
  }
  __syncthreads();
  return ps->aborted == 0;
}

template <class Job, class... Rest>
KOSMOS_DEVICE bool run_builder_jobs(u8* smem_raw, const Job& job, const Rest&... rest) {
  return run_builder_jobs_beside(smem_raw, NoSide{}, job, rest...);
}

template <int L, class Sched, class Claim, class Ready, class Epi>
KOSMOS_DEVICE bool run_builder_arch(const Sched& sched, const TensorMap* tma, const TensorMap* tmb, u8* smem_raw,
                                    Claim& claim, const Ready& ready, const Epi& epi) {
  return run_builder_jobs(smem_raw, builder_job<L>(sched, tma, tmb, claim, ready, epi));
}

}  // namespace gemm
}  // namespace kosmos
