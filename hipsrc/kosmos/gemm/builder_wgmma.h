// The Hopper builder: a warp-specialized, TMA-fed, mbarrier-pipelined wgmma tile loop.
//
// Threads 0..127 (warpgroup 0) are the producer: one thread claims tiles, runs the readiness
// hook and issues TMA loads into a kStages-deep ring of shared-memory stages. Warpgroups 1 and 2
// are consumers: each computes a 64x256 half of the 128x256 output tile with wgmma m64n256k16
// (128 fp32 accumulators per thread) and runs the epilogue straight from registers.
// The producer writes the claimed tile (or -1 = no more work, -2 = aborted) into a per-stage slot
// before the stage's full barrier completes, so consumers learn the tile from the data stream and
// the producer can run ahead into the next tile while consumers finish the epilogue.
#pragma once
#include "config.h"
#include "epilogue.h"
#include "sm90_wgmma.h"

namespace kosmos {
namespace gemm {

constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;
constexpr int kEntryRegs = 168;  // 65536 / 384 rounded down to a multiple of 8

template <int L, class Claim, class Ready, class Epi>
KOSMOS_DEVICE bool run_builder_arch(const Problem& p, const TensorMap* tma, const TensorMap* tmb, u8* smem_raw,
                                    Claim& claim, const Ready& ready, const Epi& epi) {
  using namespace sm90;
  constexpr bool AK = LayoutTraits<L>::kAKMajor;
  constexpr bool BK = LayoutTraits<L>::kBKMajor;
  u8* base = reinterpret_cast<u8*>((reinterpret_cast<u64>(smem_raw) + 1023) & ~u64(1023));
  u8* epi_smem = base + kStages * kStageBytes;  // kEpiBytes: 16 KB per consumer warpgroup
  u64* full = reinterpret_cast<u64*>(epi_smem + kEpiBytes);
  u64* empty = full + kStages;
  i32* slot = reinterpret_cast<i32*>(empty + kStages);
  __shared__ i32 aborted;

  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], 8);  // one arrival per consumer warp
    }
    aborted = 0;
    mbar_fence_init();
  }
  __syncthreads();

  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) {
      tma_prefetch_desc(tma);
      tma_prefetch_desc(tmb);
      int s = 0;
      u32 ph = 0;
      for (;;) {
        const i32 t = claim();
        i32 stop = t < 0 ? -1 : 0;
        TileCoord tc = tile_of(p, t < 0 ? 0 : t);
        for (i32 kb = tc.kb0; stop == 0 && kb < tc.kb1; ++kb) {
          if (!ready(tc, kb)) {
            stop = -2;
            break;
          }
          if (!Ready::kTrivial) fence_proxy_async_global();
          mbar_wait(&empty[s], ph ^ 1);
          slot[s] = t;
          mbar_arrive_expect_tx(&full[s], kStageBytes);
          u8* sa = base + s * kStageBytes;
          u8* sb = sa + kStageBytesA;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const i32 mn = tc.tm * kTileM + 64 * h;
            if (AK) tma_load_2d(sa + h * kBoxBytes, tma, kb * kTileK, mn, &full[s]);
            else tma_load_2d(sa + h * kBoxBytes, tma, mn, kb * kTileK, &full[s]);
          }
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const i32 col = b_chunk_col(p, tc.tn, c);
            if (BK) tma_load_2d(sb + c * kBoxBytes, tmb, kb * kTileK, col, &full[s]);
            else tma_load_2d(sb + c * kBoxBytes, tmb, col, kb * kTileK, &full[s]);
          }
          if (++s == kStages) {
            s = 0;
            ph ^= 1;
          }
        }
        if (stop != 0) {
          // Tell the consumers: no more tiles (-1) or abort (-2).
          mbar_wait(&empty[s], ph ^ 1);
          slot[s] = stop;
          mbar_arrive(&full[s]);
          if (stop == -2) aborted = 1;
          break;
        }
      }
    }
    __syncwarp();
  } else {
    setmaxnreg_inc<kConsumerRegs>();
    const int cw = wg - 1;
    const int tid = threadIdx.x - 128 * wg;
    const int warp = tid / 32, lane = tid % 32;
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.f;
    int s = 0;
    u32 ph = 0;
    bool more = true;
    while (more) {
      TileCoord tc;
      int prev = -1;
      i32 nslabs = 1;  // known once the first stage of the unit names it
      for (i32 i = 0; i < nslabs; ++i) {
        mbar_wait(&full[s], ph);
        const i32 t = slot[s];
        if (t < 0) {
          more = false;
          break;
        }
        if (i == 0) {
          tc = tile_of(p, t);
          nslabs = tc.kb1 - tc.kb0;
        }
        const u32 a0 = smem_addr(base + s * kStageBytes + cw * kBoxBytes);
        const u32 b0 = smem_addr(base + s * kStageBytes + kStageBytesA);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kTileK / 16; ++kk) {
          const u64 da = AK ? make_desc(a0 + kk * 32, 16, 1024) : make_desc(a0 + kk * 2048, kBoxBytes, 1024);
          const u64 db = BK ? make_desc(b0 + kk * 32, 16, 1024) : make_desc(b0 + kk * 2048, kBoxBytes, 1024);
          wgmma_m64n256k16<AK ? 0 : 1, BK ? 0 : 1>(acc, da, db, (i > 0 || kk > 0) ? 1u : 0u);
        }
        wgmma_commit();
        wgmma_wait<1>();
        fence_regs(acc);
        if (prev >= 0 && lane == 0) mbar_arrive(&empty[prev]);
        prev = s;
        if (++s == kStages) {
          s = 0;
          ph ^= 1;
        }
      }
      wgmma_wait<0>();
      fence_regs(acc);
      if (prev >= 0 && lane == 0) mbar_arrive(&empty[prev]);
      if (!more) break;
      if constexpr (Epi::kTmaStore) {
        // Through shared memory, in four 64x64 subtiles per warpgroup (its 64 rows x 256 columns)
        // and two 8 KB slots: subtile q is written into slot q%2 while the TMA store of subtile q-1
        // still reads the other slot. The slots hold the TMA's 128-byte swizzle (16-byte chunk ^=
        // row % 8), which also keeps the fragment's 8-row stores free of bank conflicts.
        u8* ebuf = epi_smem + cw * (kEpiBytes / 2);
        const int r0 = warp * 16 + lane / 4;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          u8* slot_q = ebuf + (q % 2) * kBoxBytes;
          if (tid == 0) bulk_wait_read_but_one();  // the store that last used this slot has read it
          (cw == 0 ? named_barrier(2, 128) : named_barrier(3, 128));
#pragma unroll
          for (int jj = 0; jj < 8; ++jj) {
#pragma unroll
            for (int i = 0; i < 2; ++i) {
              const int r = r0 + 8 * i;
              const int a = 4 * (8 * q + jj) + 2 * i;
              *reinterpret_cast<u32*>(slot_q + r * 128 + ((jj ^ (r % 8)) * 16) + (lane % 4) * 4) =
                  pack_bf16x2(acc[a], acc[a + 1]);
            }
          }
          fence_proxy_async_shared();
          (cw == 0 ? named_barrier(2, 128) : named_barrier(3, 128));
          if (tid == 0) {
            tma_store_2d(epi.map, slot_q, tc.tn * kTileN + 64 * q, tc.tm * kTileM + cw * 64);
            bulk_commit();
          }
        }
        if (Epi::kHasDone && tid == 0) bulk_wait_all();
      } else {
        // Epilogue from registers. Fragment of m64nNk16: thread (warp, lane) holds, for each n8
        // block j, rows warp*16 + lane/4 (+8) and columns 8j + 2*(lane%4) (+1).
        const i32 row0 = tc.tm * kTileM + cw * 64 + warp * 16 + lane / 4;
        const i32 lc0 = 2 * (lane % 4);
#pragma unroll
        for (int j = 0; j < 16; ++j) {
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            epi.pair(tc, row0 + 8 * i, lc0 + 8 * j, acc[4 * j + 2 * i], acc[4 * j + 2 * i + 1],
                     acc[4 * (j + 16) + 2 * i], acc[4 * (j + 16) + 2 * i + 1]);
          }
        }
      }
      if (Epi::kHasDone) {
        named_barrier(1, 256);
        if (tid == 0 && cw == 0) epi.done(tc);
      }
    }
    if (Epi::kTmaStore && tid == 0) bulk_wait_all();  // shared memory stays ours until the stores are done
    setmaxnreg_dec<kEntryRegs>();
  }
  __syncthreads();
  if (wg == 0) setmaxnreg_inc<kEntryRegs>();
  return aborted == 0;
}

}  // namespace gemm
}  // namespace kosmos
