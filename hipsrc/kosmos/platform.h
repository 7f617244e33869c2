// The CUDA/HIP portability layer: the only header in hipsrc/ (beside the GEMM tile's
// matrix-instruction layer) that may test a platform macro.
//
// Everything the rest of the device code needs from the platform is here: integer and
// 16-bit float storage types, the warp (wave) size, 16-byte vector access, a nanosecond
// clock for bounded waits, and memory-model primitives with explicit order and scope.
// System scope is for flags in peer memory (other GPUs); device scope for local queues.
#pragma once

#if defined(__HIP_PLATFORM_AMD__) || defined(__AMDGCN__)
#define KOSMOS_AMD 1
#if !defined(__HIPCC_RTC__)
#include <hip/hip_runtime.h>
#endif
#else
#define KOSMOS_NVIDIA 1
#endif
// Hopper's device pass (sm_90+): bf16x2 multiplies, wgmma, the async proxy.
#if KOSMOS_NVIDIA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KOSMOS_SM90 1
#else
#define KOSMOS_SM90 0
#endif

#define KOSMOS_DEVICE __device__ __forceinline__

namespace kosmos {

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef int i32;
typedef long long i64;

// 16 bytes, the unit every mover and staging loop moves.
struct alignas(16) vec16 {
  u32 x, y, z, w;
};

#if KOSMOS_AMD
constexpr int kWarpSize = 64;  // CDNA waves
#else
constexpr int kWarpSize = 32;
#endif

// ---- bf16 kept as raw 16-bit storage (Debian's HIP headers have no hip_bf16.h) ----
KOSMOS_DEVICE float bf16_to_f32(u16 b) { return __uint_as_float(u32(b) << 16); }

// Round to nearest even; NaNs stay NaN (quieted).
KOSMOS_DEVICE u16 f32_to_bf16(float f) {
  u32 u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return u16((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return u16(u >> 16);
}

// Two floats to a bf16 pair (a in the low half), rounded to nearest even: one instruction on
// NVIDIA sm_80+ (NaNs come out as the canonical quiet NaN there, payload-quieted here).
KOSMOS_DEVICE u32 pack_bf16x2(float a, float b) {
#if KOSMOS_NVIDIA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
  return r;
#else
  return u32(f32_to_bf16(a)) | (u32(f32_to_bf16(b)) << 16);
#endif
}

// E4M3 (OCP FP8) conversions in hardware, NVIDIA sm_89+ (KOSMOS_HW_E4M3 = 1; kosmos/mx falls
// back to its integer forms elsewhere). Written in PTX, so no step is flushed to zero whatever
// CuPy's -ftz=true does (it changes the compiler's own f32 instructions, not these).
#if KOSMOS_NVIDIA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define KOSMOS_HW_E4M3 1
// Two f32 to E4M3 codes (a's in bits 0-7), round to nearest even, saturating at +-448.
KOSMOS_DEVICE u32 hw_f32x2_to_e4m3x2_sat(float a, float b) {
  u16 r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(b), "f"(a));
  return r;
}
// Two E4M3 codes (the first in bits 0-7) times s0, s1 -> a bf16 pair (the first in the low half):
// E4M3 -> f16 (exact) -> f32 (exact) -> times the scale -> bf16, one round to nearest even.
KOSMOS_DEVICE u32 hw_e4m3x2_to_bf16x2_scaled(u32 codes2, float s0, float s1) {
  u32 out;
  asm("{\n\t.reg .b32 h;\n\t.reg .b16 lo, hi;\n\t.reg .f32 a, b;\n\t"
      "cvt.rn.f16x2.e4m3x2 h, %1;\n\t"
      "mov.b32 {lo, hi}, h;\n\t"
      "cvt.f32.f16 a, lo;\n\t"
      "cvt.f32.f16 b, hi;\n\t"
      "mul.rn.f32 a, a, %2;\n\t"
      "mul.rn.f32 b, b, %3;\n\t"
      "cvt.rn.bf16x2.f32 %0, b, a;\n\t}"
      : "=r"(out)
      : "h"(u16(codes2)), "f"(s0), "f"(s1));
  return out;
}
#else
#define KOSMOS_HW_E4M3 0
#endif

// gfx950 (CDNA4: MI350X / MI355X) converts E4M3 to bf16 with a scale in one instruction,
// v_cvt_scalef32_pk_bf16_fp8: two codes of a word (word_sel: bytes 0-1 or 2-3) times one f32 scale
// -> a bf16 pair. kosmos/mx/dequant.h takes it only where every product is a bf16 normal (no
// rounding, no flush, no overflow: exact whatever the mode registers say) and falls back to its
// integer form elsewhere. Never run here (no AMD GPU): tests/gpu/test_mx.py's 65,536 (code, scale)
// pairs check it on a gfx950.
#if KOSMOS_AMD && defined(__gfx950__)
#define KOSMOS_HW_E4M3_SCALED_BF16 1
// Codes 0 and 1 of `codes2` times `scale` -> a bf16 pair (code 0 in the low half).
KOSMOS_DEVICE u32 hw_e4m3x2_to_bf16x2_times(u32 codes2, float scale) {
  return __builtin_bit_cast(u32, __builtin_amdgcn_cvt_scalef32_pk_bf16_fp8(i32(codes2), scale, false));
}
#else
#define KOSMOS_HW_E4M3_SCALED_BF16 0
#endif

// Order this thread's earlier generic-proxy global writes before its later async-proxy (TMA)
// accesses of the same memory. Only Hopper and later have a separate async proxy.
KOSMOS_DEVICE void fence_proxy_async_generic_to_tma() {
#if KOSMOS_SM90
  asm volatile("fence.proxy.async.global;" ::: "memory");
#endif
}

// Before this thread's first TMA use of a tensor map that lives in global memory (a job record an
// earlier launch wrote with generic stores, gemm::JobRecord): the tensormap proxy's acquire of its
// 128 bytes. Maps passed as kernel parameters need none.
KOSMOS_DEVICE void fence_tensormap_acquire(const void* map) {
#if KOSMOS_SM90
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(reinterpret_cast<u64>(map)) : "memory");
#else
  (void)map;
#endif
}

// ---- products no compiler may fuse into an FMA ----
// Where two kernels must agree bit for bit on a value (route() and the in-launch routing), a
// product feeding a sum must round on its own: whether a*b+c contracts depends on inlining and
// unrolling, which differ between kernels. NVIDIA: the _rn intrinsics are never contracted; AMD:
// hipcc honours the contract pragma (its __fmul_rn is a plain, contractible product).
#if KOSMOS_AMD
template <class T>
KOSMOS_DEVICE T mul_unfused(T a, T b) {
#pragma clang fp contract(off)
  return a * b;
}
#else
KOSMOS_DEVICE float mul_unfused(float a, float b) { return __fmul_rn(a, b); }
KOSMOS_DEVICE double mul_unfused(double a, double b) { return __dmul_rn(a, b); }
#endif

// ---- the reciprocal as one special-function op (~1 ulp, no IEEE slow path) ----
// For the SwiGLU epilogues' sigmoid: __frcp_rn's round-to-nearest costs refinement FMAs, a branch
// and a slow-path call per element, and the branches cut the epilogue into blocks the compiler
// cannot interleave. rcp(+inf) = +0, rcp(NaN) = NaN, as the exact one.
KOSMOS_DEVICE float rcp_approx(float x) {
#if KOSMOS_AMD
  return __builtin_amdgcn_rcpf(x);
#elif defined(__CUDA_ARCH__)
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else  // the CPU harnesses (tests/host): the exact one
  return 1.0f / x;
#endif
}

// ---- nanosecond clock for bounded waits ----
KOSMOS_DEVICE u64 now_ns() {
#if KOSMOS_AMD
  return __builtin_amdgcn_s_memrealtime() * 10ull;  // 100 MHz constant clock on CDNA
#else
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#endif
}

KOSMOS_DEVICE void sleep_briefly() {
#if KOSMOS_AMD
  __builtin_amdgcn_s_sleep(2);
#else
  __nanosleep(64);
#endif
}

// ---- memory-model primitives ----
KOSMOS_DEVICE u64 ld_acquire_sys(const u64* p) {
#if KOSMOS_AMD
  return __hip_atomic_load(p, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  u64 v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
#endif
}

KOSMOS_DEVICE u64 ld_acquire_dev(const u64* p) {
#if KOSMOS_AMD
  return __hip_atomic_load(p, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_AGENT);
#else
  u64 v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
#endif
}

KOSMOS_DEVICE u32 ld_relaxed_dev_u32(const u32* p) {
#if KOSMOS_AMD
  return __hip_atomic_load(p, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
#else
  u32 v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#endif
}

// A word peers write at system scope (a failure broadcast), polled without ordering anything else.
KOSMOS_DEVICE u32 ld_relaxed_sys_u32(const u32* p) {
#if KOSMOS_AMD
  return __hip_atomic_load(p, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  u32 v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#endif
}

KOSMOS_DEVICE void st_release_sys(u64* p, u64 v) {
#if KOSMOS_AMD
  __hip_atomic_store(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#endif
}

KOSMOS_DEVICE void st_release_dev(u64* p, u64 v) {
#if KOSMOS_AMD
  __hip_atomic_store(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_AGENT);
#else
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#endif
}

KOSMOS_DEVICE void st_relaxed_sys_u32(u32* p, u32 v) {
#if KOSMOS_AMD
  __hip_atomic_store(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#endif
}

KOSMOS_DEVICE void red_release_sys_add(u64* p, u64 v) {
#if KOSMOS_AMD
  __hip_atomic_fetch_add(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#endif
}

// Device-scope fetch-add with acquire-release order: grid arrival counters.
KOSMOS_DEVICE u64 atomic_add_acq_rel_dev(u64* p, u64 v) {
#if KOSMOS_AMD
  return __hip_atomic_fetch_add(p, v, __ATOMIC_ACQ_REL, __HIP_MEMORY_SCOPE_AGENT);
#else
  u64 old;
  asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
  return old;
#endif
}

// Device-scope relaxed fetch-add: work-queue claims (order comes from the flags, not the claim).
KOSMOS_DEVICE u64 atomic_add_relaxed_dev(u64* p, u64 v) {
#if KOSMOS_AMD
  return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
#else
  u64 old;
  asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
  return old;
#endif
}

KOSMOS_DEVICE void fence_acq_rel_sys() {
#if KOSMOS_AMD
  __builtin_amdgcn_fence(__ATOMIC_ACQ_REL, "");
#else
  asm volatile("fence.acq_rel.sys;" ::: "memory");
#endif
}

KOSMOS_DEVICE void fence_acq_rel_dev() {
#if KOSMOS_AMD
  __builtin_amdgcn_fence(__ATOMIC_ACQ_REL, "agent");
#else
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
#endif
}

// ---- a warp (wave) as a group ----
// The warp's lanes meet here, and each sees the memory operations the others made before it (a
// wave runs its lanes in lockstep: a compiler barrier is enough there).
KOSMOS_DEVICE void warp_sync() {
#if KOSMOS_AMD
  __builtin_amdgcn_wave_barrier();
#else
  __syncwarp();
#endif
}

// Lane 0's value, on every lane of a converged warp.
KOSMOS_DEVICE u64 warp_broadcast(u64 v) {
#if KOSMOS_AMD
  return __shfl(v, 0);
#else
  return __shfl_sync(0xffffffffu, v, 0);
#endif
}

// Lane (this lane ^ m)'s v (a converged warp).
KOSMOS_DEVICE u32 shfl_xor_u32(u32 v, int m) {
#if KOSMOS_AMD
  return __shfl_xor(v, m);
#else
  return __shfl_xor_sync(0xffffffffu, v, m);
#endif
}

// Lane (this lane - d)'s v, or this lane's own v on lanes below d (a converged warp).
KOSMOS_DEVICE u32 shfl_up_u32(u32 v, int d) {
#if KOSMOS_AMD
  return __shfl_up(v, d);
#else
  return __shfl_up_sync(0xffffffffu, v, d);
#endif
}

// The sum of v over the warp's lanes, on every lane (integers: any order, the same value).
KOSMOS_DEVICE i64 warp_sum_i64(i64 v) {
  for (int m = kWarpSize / 2; m > 0; m >>= 1) {
    const u64 u = u64(v);
    v += i64(u64(shfl_xor_u32(u32(u), m)) | (u64(shfl_xor_u32(u32(u >> 32), m)) << 32));
  }
  return v;
}

// The sum (max) of v over the warp's lanes, on every lane, the same bits on every run: an xor
// butterfly (lanes i and i ^ m add the same two values at each step, and fp addition commutes).
KOSMOS_DEVICE float warp_sum(float v) {
  for (int m = kWarpSize / 2; m > 0; m >>= 1) {
#if KOSMOS_AMD
    v += __shfl_xor(v, m);
#else
    v += __shfl_xor_sync(0xffffffffu, v, m);
#endif
  }
  return v;
}
KOSMOS_DEVICE float warp_max(float v) {
  for (int m = kWarpSize / 2; m > 0; m >>= 1) {
#if KOSMOS_AMD
    v = fmaxf(v, __shfl_xor(v, m));
#else
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
#endif
  }
  return v;
}

// ---- 16-byte vector access ----
KOSMOS_DEVICE vec16 ld16(const void* p) { return *reinterpret_cast<const vec16*>(p); }
KOSMOS_DEVICE void st16(void* p, const vec16& v) { *reinterpret_cast<vec16*>(p) = v; }

// Eight bf16 (one 16-byte vector, element 0 in the low half of .x) to and from fp32.
KOSMOS_DEVICE void bf16x8_to_f32(const vec16& v, float* f) {
  const u32 p[4] = {v.x, v.y, v.z, v.w};
  for (int u = 0; u < 4; ++u) {
    f[2 * u] = bf16_to_f32(u16(p[u] & 0xffffu));
    f[2 * u + 1] = bf16_to_f32(u16(p[u] >> 16));
  }
}
KOSMOS_DEVICE vec16 f32_to_bf16x8(const float* f) {
  vec16 o;
  o.x = pack_bf16x2(f[0], f[1]);
  o.y = pack_bf16x2(f[2], f[3]);
  o.z = pack_bf16x2(f[4], f[5]);
  o.w = pack_bf16x2(f[6], f[7]);
  return o;
}

// Eight bf16 times w in fp32, rounded to bf16 once (nearest even).
KOSMOS_DEVICE vec16 scale_bf16x8(const vec16& v, float w) {
  float f[8];
  bf16x8_to_f32(v, f);
  for (int u = 0; u < 8; ++u) f[u] *= w;
  return f32_to_bf16x8(f);
}

// A load that always goes to memory (peer data polled for a sentinel).
KOSMOS_DEVICE vec16 ld16_volatile(const void* p) {
  vec16 v;
#if KOSMOS_AMD
  const u64* q = reinterpret_cast<const u64*>(p);
  u64 lo = __hip_atomic_load(q, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
  u64 hi = __hip_atomic_load(q + 1, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
  v.x = u32(lo); v.y = u32(lo >> 32); v.z = u32(hi); v.w = u32(hi >> 32);
#else
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
#endif
  return v;
}

}  // namespace kosmos
