// Compiles a device header's pure logic for the host (tests/test_moe_route_host.py): the CUDA
// qualifiers and the few intrinsics it touches, as plain C++.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#define __device__
#define __forceinline__ inline
#define __global__
using std::max;
using std::min;
inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline unsigned __float_as_uint(float x) { unsigned u; std::memcpy(&u, &x, 4); return u; }
inline float __uint_as_float(unsigned x) { float f; std::memcpy(&f, &x, 4); return f; }
inline float __fmul_rn(float a, float b) { return a * b; }  // (-std=c++17: GCC contracts nothing)
inline double __dmul_rn(double a, double b) { return a * b; }
inline void __nanosleep(unsigned) {}
inline void __syncwarp() {}
inline void __syncthreads() {}  // (compiled, never run here: the harnesses run a CTA's phases in turn)
template <class T>
inline T atomicAdd(T* p, T v) {  // the harnesses' threads run one after another
  const T old = *p;
  *p += v;
  return old;
}
template <class T>
inline T __shfl_sync(unsigned, T v, int) { return v; }
template <class T>  // (compiled, never run here: no host test reduces over a warp)
inline T __shfl_xor_sync(unsigned, T v, int) { return v; }
// One thread of one CTA, unless a harness sets them (its loops over threads or CTAs run in turn).
struct KosmosDim3 {
  unsigned x, y, z;
};
inline KosmosDim3 threadIdx{0, 0, 0}, blockIdx{0, 0, 0}, blockDim{1, 1, 1}, gridDim{1, 1, 1};
