// The Hopper layer's register epilogue walk (hipsrc/kosmos/gemm/fragment.h) on the host, a warp's 32
// lanes as threads in step (their shuffles meet in a HostLockstep), for the epilogues that
// move four n8 blocks at a time (kQuadStores: quad_transpose). Each is run twice over the same
// accumulators: as is, and with kQuadStores off (PairsOnly: one pair at a time, no shuffle); the
// two must write the same bytes. stdin: int32 case (0: SwiGLU, 1: SwiGLU keeping pre, 2: SwiGLU
// backward, 3: bf16 store, 4: fp32 store, both through EpiQuad), row_end, col0, f (the output's
// columns), then uint32 seed. stdout: "same <out elements written> <pre elements written>" or the
// first difference.
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "kosmos/gemm/fragment.h"

using namespace kosmos;
using namespace kosmos::gemm;

// 32 threads meet twice per shuffle: all values in, then all read (a generation-counted barrier).
struct Lockstep : HostLockstep {
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0;
  unsigned long generation = 0;
  unsigned slots[32];
  void meet() {
    std::unique_lock<std::mutex> lock(m);
    const unsigned long g = generation;
    if (++arrived == 32) {
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != g; });
    }
  }
  unsigned shuffle(unsigned v, int src_lane) override {
    slots[my_lane()] = v;
    meet();
    const unsigned r = slots[src_lane];
    meet();
    return r;
  }
  int lane() const override { return my_lane(); }
  static int& my_lane() {
    static thread_local int l = 0;
    return l;
  }
};

template <class E>
struct PairsOnly : E {
  static constexpr bool kQuadStores = false;
  explicit PairsOnly(const E& e) : E(e) {}
};

constexpr int kN = 256, kAcc = kN / 2;  // one warpgroup's m64n256 fragment: 128 floats a thread

static float value(uint32_t seed, int lane, int a) {  // a deterministic spread, signs and scales
  uint32_t h = seed ^ (uint32_t(lane) * 0x9E3779B9u) ^ (uint32_t(a) * 0x85EBCA6Bu);
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 12;
  return (float(h % 20001u) - 10000.0f) / 2500.0f;  // [-4, 4]
}

// Warp 0 of warpgroup 0: lane l holds rows row0 + l / 4 (+8), columns 8j + 2 (l % 4) (+1).
template <class Epi>
static void run_warp(const Epi& epi, const TileCoord& t, uint32_t seed, bool lockstep) {
  Lockstep ls;
  host_lockstep = lockstep ? &ls : nullptr;
  auto lane_body = [&](int lane) {
    Lockstep::my_lane() = lane;
    float acc[kAcc];
    for (int a = 0; a < kAcc; ++a) acc[a] = value(seed, lane, a);
    fragment_pairs<kN>(epi, t, t.row0 + lane / 4, 2 * (lane % 4), acc);
  };
  if (lockstep) {
    std::vector<std::thread> lanes;
    for (int l = 0; l < 32; ++l) lanes.emplace_back(lane_body, l);
    for (auto& th : lanes) th.join();
  } else {
    for (int l = 0; l < 32; ++l) lane_body(l);
  }
  host_lockstep = nullptr;
}

int main() {
  int32_t head[4];
  uint32_t seed;
  if (fread(head, 4, 4, stdin) != 4 || fread(&seed, 4, 1, stdin) != 1) return 2;
  const int which = head[0];
  const i32 rows = 16, f = head[3];
  TileCoord t{};
  t.row0 = 0;
  t.row_end = head[1];
  t.col0 = head[2];
  t.half = kN / 2;
  const size_t out_cols = which == 2 ? 2 * f : f;  // the backward writes [d gate, d up]
  std::vector<u16> out_q(rows * out_cols, 0xFFFF), out_p(rows * out_cols, 0xFFFF);
  std::vector<u16> pre_q(rows * 2 * f, 0xFFFF), pre_p(rows * 2 * f, 0xFFFF);
  if (which == 2) {  // the backward reads pre: the forward's kept [gate, up], bf16
    for (size_t i = 0; i < pre_q.size(); ++i) pre_q[i] = pre_p[i] = f32_to_bf16(value(seed + 1, 0, int(i)));
    const EpiSwiGLUBackward q{out_q.data(), 2 * f, rows, f, pre_q.data()};
    const EpiSwiGLUBackward p{out_p.data(), 2 * f, rows, f, pre_p.data()};
    run_warp(q, t, seed, true);
    run_warp(PairsOnly<EpiSwiGLUBackward>(p), t, seed, false);
  } else if (which == 3) {  // a plain bf16 store: the tile's 256 columns from col0
    const EpiStoreBf16 q{out_q.data(), f, rows, f}, p{out_p.data(), f, rows, f};
    run_warp(EpiQuad<EpiStoreBf16>(q), t, seed, true);
    run_warp(p, t, seed, false);
  } else if (which == 4) {  // fp32, compared as bit patterns in pairs of u16
    // unwritten: an all-ones NaN, which value() never gives (it can give any finite float, -1 too)
    const uint32_t unwritten = 0xFFFFFFFFu;
    float mark;
    std::memcpy(&mark, &unwritten, 4);
    std::vector<float> fq(rows * f, mark), fp(rows * f, mark);
    const EpiStoreF32 q{fq.data(), f, rows, f}, p{fp.data(), f, rows, f};
    run_warp(EpiQuad<EpiStoreF32>(q), t, seed, true);
    run_warp(p, t, seed, false);
    size_t written = 0;
    for (size_t i = 0; i < fq.size(); ++i) {
      if (std::memcmp(&fq[i], &fp[i], 4) != 0) {
        printf("out differs at row %zu col %zu: quad %g pairs %g\n", i / f, i % f, fq[i], fp[i]);
        return 1;
      }
      written += std::memcmp(&fq[i], &unwritten, 4) != 0;
    }
    printf("same %zu 0\n", written);
    return 0;
  } else {
    const EpiSwiGLU q{out_q.data(), f, rows, f, which == 1 ? pre_q.data() : nullptr};
    const EpiSwiGLU p{out_p.data(), f, rows, f, which == 1 ? pre_p.data() : nullptr};
    run_warp(q, t, seed, true);
    run_warp(PairsOnly<EpiSwiGLU>(p), t, seed, false);
  }
  size_t written = 0;
  for (size_t i = 0; i < out_q.size(); ++i) {
    if (out_q[i] != out_p[i]) {
      printf("out differs at row %zu col %zu: quad %04x pairs %04x\n", i / out_cols, i % out_cols, out_q[i], out_p[i]);
      return 1;
    }
    written += out_q[i] != 0xFFFF;
  }
  size_t pre_written = 0;
  for (size_t i = 0; i < pre_q.size(); ++i) {
    if (pre_q[i] != pre_p[i]) {
      printf("pre differs at row %zu col %zu: quad %04x pairs %04x\n", i / (2 * f), i % (2 * f), pre_q[i], pre_p[i]);
      return 1;
    }
    pre_written += which == 1 && pre_q[i] != 0xFFFF;  // (case 2 reads pre: not counted)
  }
  printf("same %zu %zu\n", written, pre_written);
  return 0;
}
