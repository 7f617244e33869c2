// Hopper (sm_90a) primitives of the GEMM builder: mbarriers, TMA tile loads, wgmma, setmaxnreg.
// Included only when arch.h selects KOSMOS_GEMM_WGMMA. All inline PTX.
#pragma once
#include "../platform.h"
#include "config.h"

namespace kosmos {
namespace gemm {
namespace sm90 {

KOSMOS_DEVICE u32 smem_addr(const void* p) { return u32(__cvta_generic_to_shared(p)); }

// 16 bytes from shared memory at a shared-window address (an ld.shared: a generic pointer into the
// dynamic shared memory compiles to a generic load).
KOSMOS_DEVICE vec16 lds16(u32 saddr) {
  vec16 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(saddr) : "memory");
  return v;
}

// ---- mbarrier ----
KOSMOS_DEVICE void mbar_init(u64* bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
KOSMOS_DEVICE void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
KOSMOS_DEVICE void mbar_arrive_expect_tx(u64* bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
KOSMOS_DEVICE void mbar_arrive(u64* bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// `count` arrivals at once (a ping-pong warpgroup's 4 warps release a stage the 8 consumer warps share)
KOSMOS_DEVICE void mbar_arrive(u64* bar, u32 count) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
KOSMOS_DEVICE bool mbar_try_wait(u64* bar, u32 parity) {
  u32 ok;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return ok != 0;
}
KOSMOS_DEVICE void mbar_wait(u64* bar, u32 parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}
// Before the barrier's shared memory is used for anything else.
KOSMOS_DEVICE void mbar_inval(u64* bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// ---- TMA ----
KOSMOS_DEVICE void tma_prefetch_desc(const TensorMap* tm) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(tm)) : "memory");
}

// Load one 2-D box at element coordinates (c0 inner, c1 outer) into shared memory; completes
// `bytes` of transaction count on `bar`. Out-of-bounds elements are filled with zeros.
KOSMOS_DEVICE void tma_load_2d(void* dst, const TensorMap* tm, i32 c0, i32 c1, u64* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<u64>(tm)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}

// The same for one box of a 3-D map (c2: the group, for B operands stored [groups][rows][cols]).
KOSMOS_DEVICE void tma_load_3d(void* dst, const TensorMap* tm, i32 c0, i32 c1, i32 c2, u64* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<u64>(tm)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
      : "memory");
}

// Store one 2-D box from shared memory (async proxy; commit with bulk_commit). Out-of-bounds
// elements of the box are not written (row and column tails).
KOSMOS_DEVICE void tma_store_2d(const TensorMap* tm, const void* src, i32 c0, i32 c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];"
               ::"l"(reinterpret_cast<u64>(tm)), "r"(smem_addr(src)), "r"(c0), "r"(c1)
               : "memory");
}
// The same box added into global memory (out += box, fp32 adds done by the TMA unit in L2).
KOSMOS_DEVICE void tma_reduce_add_2d(const TensorMap* tm, const void* src, i32 c0, i32 c1) {
  asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];"
               ::"l"(reinterpret_cast<u64>(tm)), "r"(smem_addr(src)), "r"(c0), "r"(c1)
               : "memory");
}
// 1-D bulk copies (no tensor map; the movers' rows): `bytes` a multiple of 16, both addresses
// 16-byte aligned. The load completes `bytes` of transaction count on `bar`; the store joins the
// thread's current bulk group (bulk_commit, then the waits below).
KOSMOS_DEVICE void bulk_load(void* dst, const void* src, u32 bytes, u64* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(smem_addr(dst)), "l"(reinterpret_cast<u64>(src)), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}
KOSMOS_DEVICE void bulk_store(void* dst, const void* src, u32 bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
               ::"l"(reinterpret_cast<u64>(dst)), "r"(smem_addr(src)), "r"(bytes)
               : "memory");
}
KOSMOS_DEVICE void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Wait until this thread's committed bulk stores have finished reading shared memory.
KOSMOS_DEVICE void bulk_wait_read_all() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
// The same, but the most recent group may still be reading.
KOSMOS_DEVICE void bulk_wait_read_but_one() { asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory"); }
// Wait until they are complete (written to global memory).
KOSMOS_DEVICE void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
// Ordinary shared-memory stores become visible to the async proxy (TMA store, wgmma).
KOSMOS_DEVICE void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Generic-proxy writes (by other CTAs or peers, observed through an acquire) become visible to
// the TMA reads this thread issues next.
KOSMOS_DEVICE void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }

// ---- registers per warpgroup ----
template <int N> KOSMOS_DEVICE void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N)); }
template <int N> KOSMOS_DEVICE void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N)); }

// Named barrier among `count` threads (the builder: 1 both consumer warpgroups, 2 / 3 each, 4 the
// producer's; 5 / 6 a ping-pong warpgroup's turn).
KOSMOS_DEVICE void named_barrier(u32 id, u32 count) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory"); }
// Arrive at a named barrier without waiting (the other side bar.syncs with the same count).
KOSMOS_DEVICE void named_barrier_arrive(u32 id, u32 count) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// ---- L2-coherent global accesses (data other CTAs of this launch write or read: not through L1) ----
KOSMOS_DEVICE void st_cg_f32(float* p, float v) { asm volatile("st.global.cg.f32 [%0], %1;" ::"l"(p), "f"(v) : "memory"); }
KOSMOS_DEVICE float ld_cg_f32(const float* p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
  return v;
}

// ---- wgmma ----
// Shared-memory matrix descriptor, 128-byte swizzle. Addresses and offsets in bytes.
//   K-major operand: rows of 64 bf16 (128 B); 8-row groups SBO = 1024 B apart; LBO unused.
//   MN-major operand: 64 MN-contiguous elements per 128-B row, one row per k; 8-k groups
//   SBO = 1024 B apart; 64-element MN blocks LBO bytes apart.
KOSMOS_DEVICE u64 make_desc(u32 saddr, u32 lbo, u32 sbo) {
  u64 d = 0;
  d |= u64((saddr & 0x3FFFF) >> 4);
  d |= u64((lbo & 0x3FFFF) >> 4) << 16;
  d |= u64((sbo & 0x3FFFF) >> 4) << 32;
  d |= u64(1) << 62;  // 128-byte swizzle
  return d;
}

KOSMOS_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
KOSMOS_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> KOSMOS_DEVICE void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }

// Registers of an m64nN fp32 accumulator fragment (N/2 a thread): fence them across the asynchronous wgmma.
template <int kAcc = 128>
KOSMOS_DEVICE void fence_regs(float* d) {
#pragma unroll
  for (int i = 0; i < kAcc; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The accumulator operands of an m64nNk16 (N / 2 fp32 a thread): the register list in the
// instruction text and the matching asm output operands, %0 .. %(N/2 - 1).
#define KOSMOS_WGMMA_REGS128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define KOSMOS_WGMMA_ACC128 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define KOSMOS_WGMMA_REGS96 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}"
#define KOSMOS_WGMMA_ACC96 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define KOSMOS_WGMMA_REGS64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define KOSMOS_WGMMA_ACC64 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// D[64xN] (+)= A[64x16] * B[16xN] (N / 2 accumulators a thread) for one width N, two forms:
//   wgmma_m64nNk16<TA, TB>(d, desc_a, desc_b, scale_d)  A and B in shared memory; TA/TB: 1 when the
//                                                        operand is MN-major (transposed)
//   wgmma_m64nNk16_rs<TB>(d, a, desc_b, scale_d)         A from registers: a[0..3] the m64k16 bf16
//       fragment (per warp the mma.m16n8k16 A layout: rows lane/4 (+8), columns 2 (lane%4) (+1) (+8))
// SS / RS: the operand numbers after the accumulators' (the scale_d predicate's, then the tail).
#define KOSMOS_WGMMA_WIDTH(N, ACC, REGS, SS_P, SS_TAIL, RS_P, RS_TAIL)                                       \
  template <int TA, int TB>                                                                                  \
  KOSMOS_DEVICE void wgmma_m64n##N##k16(float* d, u64 desc_a, u64 desc_b, u32 scale_d) {                     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" SS_P ", 0;\n"                                          \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 " REGS SS_TAIL ";\n}\n"           \
                 : ACC                                                                                        \
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));                                \
  }                                                                                                          \
  template <int TB>                                                                                          \
  KOSMOS_DEVICE void wgmma_m64n##N##k16_rs(float* d, const u32* a, u64 desc_b, u32 scale_d) {                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" RS_P ", 0;\n"                                          \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 " REGS RS_TAIL ";\n}\n"           \
                 : ACC                                                                                        \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));          \
  }
KOSMOS_WGMMA_WIDTH(256, KOSMOS_WGMMA_ACC128, KOSMOS_WGMMA_REGS128, "130", ", %128, %129, p, 1, 1, %131, %132",
                   "133", ", {%128, %129, %130, %131}, %132, p, 1, 1, %134")
KOSMOS_WGMMA_WIDTH(192, KOSMOS_WGMMA_ACC96, KOSMOS_WGMMA_REGS96, "98", ", %96, %97, p, 1, 1, %99, %100",
                   "101", ", {%96, %97, %98, %99}, %100, p, 1, 1, %102")
KOSMOS_WGMMA_WIDTH(128, KOSMOS_WGMMA_ACC64, KOSMOS_WGMMA_REGS64, "66", ", %64, %65, p, 1, 1, %67, %68",
                   "69", ", {%64, %65, %66, %67}, %68, p, 1, 1, %70")
#undef KOSMOS_WGMMA_WIDTH

// The m64nNk16 of a tile configuration: N = BN, one consumer warpgroup's 64 rows of the tile.
template <int BN, int TA, int TB>
KOSMOS_DEVICE void wgmma_tile(float* d, u64 desc_a, u64 desc_b, u32 scale_d) {
  if constexpr (BN == 256) wgmma_m64n256k16<TA, TB>(d, desc_a, desc_b, scale_d);
  else if constexpr (BN == 192) wgmma_m64n192k16<TA, TB>(d, desc_a, desc_b, scale_d);
  else wgmma_m64n128k16<TA, TB>(d, desc_a, desc_b, scale_d);
}
template <int BN, int TB>
KOSMOS_DEVICE void wgmma_tile_rs(float* d, const u32* a, u64 desc_b, u32 scale_d) {
  if constexpr (BN == 256) wgmma_m64n256k16_rs<TB>(d, a, desc_b, scale_d);
  else if constexpr (BN == 192) wgmma_m64n192k16_rs<TB>(d, a, desc_b, scale_d);
  else wgmma_m64n128k16_rs<TB>(d, a, desc_b, scale_d);
}

}  // namespace sm90
}  // namespace gemm
}  // namespace kosmos
