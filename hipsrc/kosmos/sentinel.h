// Reduce-scatter arrival detected in the data itself: staging buffers are filled with a
// signalling NaN that no arithmetic produces (arithmetic NaNs are quiet), so a reader knows a
// peer's partial has landed when the sentinel is gone. Inputs that happen to hold the sentinel
// bits are turned into a quiet NaN on the way in (canonical), so they cannot hang a reader.
#pragma once
#include "platform.h"

namespace kosmos {

template <class T> struct Sentinel;

template <> struct Sentinel<u16> {  // bf16: 8 lanes per 16-byte vector
  static constexpr u32 kBits = 0x7fa5u, kQuiet = 0x7fc0u;
  static constexpr int kLanes = 8;
  KOSMOS_DEVICE static float lane(const vec16& v, int i) {
    const u32 w = (&v.x)[i >> 1];
    return bf16_to_f32(u16((i & 1) ? w >> 16 : w & 0xffffu));
  }
  KOSMOS_DEVICE static bool has(const vec16& v) {
    bool any = false;
#pragma unroll
    for (int i = 0; i < 4; ++i) any |= ((&v.x)[i] & 0xffffu) == kBits || ((&v.x)[i] >> 16) == kBits;
    return any;
  }
  KOSMOS_DEVICE static vec16 canonical(vec16 v) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      u32& w = (&v.x)[i];
      if ((w & 0xffffu) == kBits) w = (w & 0xffff0000u) | kQuiet;
      if ((w >> 16) == kBits) w = (w & 0xffffu) | (kQuiet << 16);
    }
    return v;
  }
  KOSMOS_DEVICE static vec16 pack(const float* a) {
    vec16 v;
#pragma unroll
    for (int i = 0; i < 4; ++i) (&v.x)[i] = pack_bf16x2(a[2 * i], a[2 * i + 1]);
    return v;
  }
  KOSMOS_DEVICE static vec16 poison() {
    const u32 w = kBits * 0x10001u;
    return vec16{w, w, w, w};
  }
};

template <> struct Sentinel<float> {  // fp32: 4 lanes per 16-byte vector
  static constexpr u32 kBits = 0x7fa5a5a5u, kQuiet = 0x7fc00000u;
  static constexpr int kLanes = 4;
  KOSMOS_DEVICE static float lane(const vec16& v, int i) { return __uint_as_float((&v.x)[i]); }
  KOSMOS_DEVICE static bool has(const vec16& v) {
    return v.x == kBits || v.y == kBits || v.z == kBits || v.w == kBits;
  }
  KOSMOS_DEVICE static vec16 canonical(vec16 v) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if ((&v.x)[i] == kBits) (&v.x)[i] = kQuiet;
    return v;
  }
  KOSMOS_DEVICE static vec16 pack(const float* a) {
    return vec16{__float_as_uint(a[0]), __float_as_uint(a[1]), __float_as_uint(a[2]), __float_as_uint(a[3])};
  }
  KOSMOS_DEVICE static vec16 poison() { return vec16{kBits, kBits, kBits, kBits}; }
};

// Two staging buffers of P*m rows x cols elements, chosen by epoch parity: call e writes
// buffer e % 2 and poisons the other for call e + 1.
struct Staging {
  const u64* peer_bases;
  u64 off, buffer_bytes;
  u64 m, cols;  // rows per chunk, elements per row
  KOSMOS_DEVICE u64 cur(u64 epoch) const { return off + (epoch & 1) * buffer_bytes; }
  KOSMOS_DEVICE u64 next(u64 epoch) const { return off + ((epoch + 1) & 1) * buffer_bytes; }
  KOSMOS_DEVICE u8* at(int rank, u64 buf_off) const { return reinterpret_cast<u8*>(peer_bases[rank] + buf_off); }
};

// Every thread poisons (and, given x, stages) the same grid-stride indices, fencing between,
// so a reader that saw this call's data at an index finds the poison there in the next call.
template <class T>
KOSMOS_DEVICE void poison_and_stage(const Staging& s, int rank, u64 epoch, const vec16* x) {
  vec16* cur = reinterpret_cast<vec16*>(s.at(rank, s.cur(epoch)));
  vec16* next = reinterpret_cast<vec16*>(s.at(rank, s.next(epoch)));
  const u64 n = s.buffer_bytes / 16, stride = u64(gridDim.x) * blockDim.x;
  const u64 first = u64(blockIdx.x) * blockDim.x + threadIdx.x;
  for (u64 i = first; i < n; i += stride) st16(next + i, Sentinel<T>::poison());
  // The next call's partials land in `next` through TMA stores (another proxy): order the poison
  // before them, and (system scope) before anything a peer may read after this call.
  fence_proxy_async_generic_to_tma();
  fence_acq_rel_sys();
  if (x)
    for (u64 i = first; i < n; i += stride) st16(cur + i, Sentinel<T>::canonical(ld16(x + i)));
}

}  // namespace kosmos
