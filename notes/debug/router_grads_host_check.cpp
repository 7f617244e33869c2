// Ad hoc host check (session 26) that router_grads.h pair_weight_grads (side_prefetch.patch) gives
// bit for bit the d w of main's one-pair-at-a-time pair_weight_grad, on a warp of 32 user-level
// contexts. Needs the shim with HostWarp (route_warp.patch's tests/host/shim.h). To run:
//   mkdir /tmp/rg && cp -r <tree with side_prefetch>/hipsrc /tmp/rg/ && cp <route_warp tree>/tests/host/shim.h /tmp/rg/
//   git show <main before side_prefetch>:hipsrc/kosmos/moe/router_grads.h | sed -n '/^KOSMOS_DEVICE float pair_weight_grad/,/^}/p' \
//     | sed s/pair_weight_grad/old_pair_weight_grad/ > /tmp/rg/old.inc
//   c++ -O2 -std=c++17 -include shim.h -Ihipsrc -I. router_grads_host_check.cpp -o rg && ./rg H K T FAILED
// (session 26: H 2048/7168/520/4096, K 8/8/16/5, a failed status: 0 mismatches; the u loop reversed: 79 of 160)
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include <ucontext.h>
#include "kosmos/moe/router_grads.h"
using namespace kosmos;
using namespace kosmos::moe;
namespace kosmos { namespace moe {
#include "old.inc"
}}
struct FiberWarp : HostWarp {
  ucontext_t main_ctx, ctx[kWarpSize];
  unsigned slots[kWarpSize];
  int current = 0;
  int lane() const override { return current; }
  void pass() { const int me = current; current = (me + 1) % kWarpSize; swapcontext(&ctx[me], &ctx[current]); }
  unsigned exchange(unsigned v, int src) override { slots[current] = v; pass(); const unsigned r = slots[src]; pass(); return r; }
  void done() { const int me = current; current = me + 1; swapcontext(&ctx[me], me + 1 < kWarpSize ? &ctx[me + 1] : &main_ctx); }
};
static u16 bf(float f) { unsigned u = __float_as_uint(f); return u16((u + 0x7fff + ((u >> 16) & 1)) >> 16); }
int main(int argc, char** argv) {
  const int H = atoi(argv[1]), K = atoi(argv[2]), T = atoi(argv[3]), fail = atoi(argv[4]);
  std::mt19937 rng(H * 7 + K);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int rows = T * K;
  static std::vector<u16> comb(size_t(rows) * H), dy(size_t(T) * H);
  for (auto& x : comb) x = bf(nd(rng));
  for (auto& x : dy) x = bf(nd(rng));
  static std::vector<i32> slot(rows);
  for (int p = 0; p < rows; ++p) slot[p] = (p % 7 == 3) ? -1 : (p * 13) % rows;  // some dropped pairs
  static i64 status = fail;
  static RouterGrads r{};
  r.comb = comb.data(); r.own_y = nullptr; r.own_runs = nullptr; r.slot = slot.data(); r.dy = dy.data();
  r.status = &status; r.hidden = H; r.top_k = K; r.tokens = T;
  static std::vector<float> got(rows), want(rows);
  static FiberWarp warp;
  static std::vector<char> stacks(size_t(kWarpSize) << 17);
  static int gT = T, gK = K;
  host_warp = &warp;
  for (int lane = 0; lane < kWarpSize; ++lane) {
    getcontext(&warp.ctx[lane]);
    warp.ctx[lane].uc_stack.ss_sp = &stacks[size_t(lane) << 17];
    warp.ctx[lane].uc_stack.ss_size = size_t(1) << 17;
    makecontext(&warp.ctx[lane], (void (*)())+[](int lane) {
      for (int t = 0; t < gT; ++t) {
        float dw[kMaxTopK];
        for (int j = 0; j < kMaxTopK; ++j) dw[j] = 0.f;
        pair_weight_grads<0>(r, t, lane, dw);
        if (gK > kPairsAtOnce) pair_weight_grads<kPairsAtOnce>(r, t, lane, dw);
        for (int j = 0; j < gK; ++j) {
          const float o = old_pair_weight_grad(r, i64(t) * gK + j, lane);
          if (lane == 0) { got[t * gK + j] = dw[j]; want[t * gK + j] = o; }
        }
      }
      warp.done();
    }, 1, lane);
  }
  swapcontext(&warp.main_ctx, &warp.ctx[0]);
  int bad = 0;
  for (int p = 0; p < rows; ++p) if (__float_as_uint(got[p]) != __float_as_uint(want[p])) { if (++bad < 3) printf("pair %d: %08x vs %08x\n", p, __float_as_uint(got[p]), __float_as_uint(want[p])); }
  printf("H %d k %d pairs %d mismatches %d (first d w %g)\n", H, K, rows, bad, got[0]);
  return 0;
}
