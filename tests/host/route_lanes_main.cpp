// route.h's routing rule by L lanes a token (route_token_lanes<L>, the MoE forward launch's) against
// its one-thread form (route_token), on the host: a warp of 32 lanes (one warp of fiber_cta.h's
// emulated CTA: user-level contexts, each shuffle waits for every lane, the next lane to run picked
// at random) routes 32 / L tokens at a time, and each result must equal route_token's bit for bit,
// every lane having taken as many shuffles. argv: L E k score groups
// topk_groups normalize has_bias tokens seed ties (ties 1: logits and bias on a coarse grid, so
// equal scores and equal group sums occur; 2: that, and every third row all -inf; 3: random, with
// a NaN logit in every other row and a NaN bias entry). stdout: the first mismatches, then
// "exchanges X tokens T mismatches M" (X: lane 0's shuffles).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "fiber_cta.h"
#include "kosmos/moe/route.h"

using namespace kosmos;
using namespace kosmos::moe;

static unsigned bits(float f) { return __float_as_uint(f); }

template <int L>
static int run(const int* a) {
  const int E = a[0], k = a[1], T = a[7], ties = a[9];
  std::mt19937 rng(a[8]);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  auto draw = [&] { return ties ? std::round(normal(rng) * 2.0f) / 2.0f : normal(rng); };
  std::vector<float> logits(size_t(T) * E), bias(E);
  for (float& x : logits) x = draw();
  if (ties == 2)  // every third row all -inf: softmax scores all NaN, sigmoid all 0
    for (int t = 0; t < T; t += 3)
      for (int e = 0; e < E; ++e) logits[size_t(t) * E + e] = -__int_as_float(0x7f800000);
  for (float& x : bias) x = ties ? draw() / 4.0f : normal(rng) / 8.0f;
  if (ties == 3) {  // some choice values NaN: a NaN logit in every other row, a NaN bias entry
    for (int t = 0; t < T; t += 2) logits[size_t(t) * E + size_t(rng() % unsigned(E))] = __int_as_float(0x7fc00000);
    bias[size_t(rng() % unsigned(E))] = __int_as_float(0x7fc00000);
  }
  const RouteRule rule{E, k, a[2], a[3], a[4], a[5], 2.5f, 0, a[6] ? bias.data() : nullptr};

  std::vector<int> ex1(size_t(T) * k, -7), ex2(size_t(T) * k, -7);
  std::vector<float> w1(size_t(T) * k, 0.0f), w2(size_t(T) * k, 0.0f);
  for (int t = 0; t < T; ++t) route_token(rule, &logits[size_t(t) * E], &ex1[size_t(t) * k], &w1[size_t(t) * k]);
  // one warp of the host-emulated CTA (fiber_cta.h): lane = threadIdx.x, the next lane to run at random
  FiberCta warp{static_cast<unsigned>(a[8])};
  warp.run(kWarpSize, [&] {
    const int lane = int(threadIdx.x), group = kWarpSize / L;
    for (int t0 = 0; t0 < T; t0 += group) {  // (as the launch: lanes past the last token route it again)
      const int t = t0 + lane / L, sub = lane % L;
      const float* row = &logits[size_t(std::min(t, T - 1)) * E];
      int ex[kMaxTopK];
      float w[kMaxTopK];
      const bool writes = t < T && sub == 0;
      route_token_lanes<L>(rule, row, rule_row_exp(rule, row), sub, writes ? ex : nullptr, w);
      if (writes)
        for (int s = 0; s < k; ++s) {
          ex2[size_t(t) * k + s] = ex[s];
          w2[size_t(t) * k + s] = w[s];
        }
    }
  });

  int bad = 0;
  for (int lane = 1; lane < kWarpSize; ++lane)
    if (warp.shuffles(lane) != warp.shuffles(0)) {
      printf("lanes out of step: lane %d made %ld exchanges, lane 0 %ld\n", lane, warp.shuffles(lane), warp.shuffles(0));
      ++bad;
    }
  for (int t = 0; t < T; ++t) {
    bool same = true;
    for (int s = 0; s < k; ++s)
      same = same && ex1[size_t(t) * k + s] == ex2[size_t(t) * k + s] &&
             bits(w1[size_t(t) * k + s]) == bits(w2[size_t(t) * k + s]);
    if (!same && ++bad <= 3) {
      printf("token %d: thread", t);
      for (int s = 0; s < k; ++s) printf(" %d:%08x", ex1[size_t(t) * k + s], bits(w1[size_t(t) * k + s]));
      printf(" | %d lanes", L);
      for (int s = 0; s < k; ++s) printf(" %d:%08x", ex2[size_t(t) * k + s], bits(w2[size_t(t) * k + s]));
      printf("\n");
    }
  }
  printf("exchanges %ld tokens %d mismatches %d\n", warp.shuffles(0), T, bad);
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 12) return 2;
  int a[10];
  for (int i = 0; i < 10; ++i) a[i] = std::atoi(argv[i + 2]);
  switch (std::atoi(argv[1])) {
    case 1: return run<1>(a);
    case 2: return run<2>(a);
    case 4: return run<4>(a);
    case 8: return run<8>(a);
    case 32: return run<32>(a);
    default: return 2;
  }
}
