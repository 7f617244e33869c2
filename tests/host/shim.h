// Compiles a device header's pure logic for the host (tests/test_moe_route_host.py): the CUDA
// qualifiers and the few intrinsics it touches, as plain C++.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#define __device__
#define __forceinline__ inline
#define __global__
#define __shared__ static  // (compiled, never run here)
using std::max;
using std::min;
inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline unsigned __float_as_uint(float x) { unsigned u; std::memcpy(&u, &x, 4); return u; }
inline float __uint_as_float(unsigned x) { float f; std::memcpy(&f, &x, 4); return f; }
inline float __fmul_rn(float a, float b) { return a * b; }  // (-std=c++17: GCC contracts nothing)
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __expf(float x) { return std::exp(x); }
inline void __nanosleep(unsigned) {}
inline void __syncwarp() {}
// A CTA whose threads run as user-level contexts (tests/host/fiber_cta.h) sets this: a
// __syncthreads then waits there for the others. Unset (the other harnesses run a CTA's phases in
// turn), it does nothing.
struct HostBarrier {
  virtual void barrier() = 0;
};
inline HostBarrier* host_barrier = nullptr;
inline void __syncthreads() {
  if (host_barrier != nullptr) host_barrier->barrier();
}
template <class T>
inline T atomicAdd(T* p, T v) {  // the harnesses' threads run one after another
  const T old = *p;
  *p += v;
  return old;
}
template <class T>
inline T atomicCAS(T* p, T expected, T desired) {  // (compiled, never run here)
  const T old = *p;
  if (old == expected) *p = desired;
  return old;
}
// A warp whose lanes run in step (tests/host/epilogue_main.cpp: threads; fiber_cta.h: fibers)
// sets this: 4-byte shuffles then meet there. Unset (every other harness: one thread), a
// shuffle returns its own value.
struct HostLockstep {
  virtual unsigned shuffle(unsigned v, int src_lane) = 0;  // lane src_lane's v, every lane at once
  virtual int lane() const = 0;                            // the lane running now
};
inline HostLockstep* host_lockstep = nullptr;
template <class T>
inline T host_shuffle(T v, int src_lane) {
  if constexpr (sizeof(T) == 4) {
    if (host_lockstep != nullptr) {
      unsigned u;
      std::memcpy(&u, &v, 4);
      u = host_lockstep->shuffle(u, src_lane);
      std::memcpy(&v, &u, 4);
    }
  }
  return v;
}
template <class T>
inline T __shfl_sync(unsigned, T v, int src_lane) { return host_shuffle(v, src_lane); }
template <class T>
inline T __shfl_xor_sync(unsigned, T v, int mask) {
  return host_shuffle(v, host_lockstep != nullptr ? host_lockstep->lane() ^ mask : 0);
}
template <class T>
inline T __shfl_up_sync(unsigned, T v, int d) {
  const int lane = host_lockstep != nullptr ? host_lockstep->lane() : 0;
  return host_shuffle(v, lane >= d ? lane - d : lane);
}
template <class T>
inline T atomicMax(T* p, T v) {  // the harnesses' threads run one after another
  const T old = *p;
  if (v > old) *p = v;
  return old;
}
// One thread of one CTA, unless a harness sets them (its loops over threads or CTAs run in turn).
struct KosmosDim3 {
  unsigned x, y, z;
};
inline KosmosDim3 threadIdx{0, 0, 0}, blockIdx{0, 0, 0}, blockDim{1, 1, 1}, gridDim{1, 1, 1};
