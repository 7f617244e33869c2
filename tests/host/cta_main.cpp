// CTA-wide device steps on a host-emulated CTA (fiber_cta.h), against serial references:
//   scan THREADS N SEED                        cta.h cta_inclusive_scan of N random counts
//   verdict THREADS P E_LOC CAPACITY SEED KIND layout.h counts_verdict (KIND 1: one count is -1, a
//                                              refused rank's)
//   place THREADS GRID T E K SEED SKEW         plan.h place_chunks on every CTA of a grid of GRID
//                                              (SKEW 1: every token takes experts 0..K-1)
//   route GRID T E K SCORE GROUPS TOPK_GROUPS BIAS LOSSES LENDABLE TIES SEED
//                                              route_rounds.h route_chunks on every CTA of a grid of
//                                              GRID (kRouteThreads threads; LENDABLE bytes of lent
//                                              stages: 0 routes from global memory, -1 exactly what
//                                              staging the rows takes, -2 a byte less; TIES 1:
//                                              logits from 8 values, so equal
//                                              scores and group sums occur) against route_token one
//                                              thread a token and the standalone kernels' chunk sums
// stdout: "mismatches M" (0: every value as the reference's), after the first few mismatches.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "fiber_cta.h"
#include "kosmos/moe/layout.h"
#include "kosmos/moe/plan.h"
#include "kosmos/moe/route_rounds.h"

using namespace kosmos;
using namespace kosmos::moe;

static int mismatches = 0;
template <class T>
static void expect(const char* what, size_t i, T got, T want) {
  if (got == want) return;
  if (++mismatches <= 5) std::printf("%s[%zu]: %lld, want %lld\n", what, i, (long long)got, (long long)want);
}

static void scan(int threads, int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<i32> a(static_cast<size_t>(n)), want(static_cast<size_t>(n));
  i32 run = 0;
  for (int i = 0; i < n; ++i) want[size_t(i)] = run += a[size_t(i)] = i32(rng() % 100);
  FiberCta cta(seed + 1);
  cta.run(threads, [&] { cta_inclusive_scan(a.data(), n); });
  for (int i = 0; i < n; ++i) expect("scan", size_t(i), a[size_t(i)], want[size_t(i)]);
}

static void verdict(int threads, int P, int L, long long capacity, unsigned seed, int kind) {
  std::mt19937 rng(seed);
  const int E = P * L;
  std::vector<i32> counts(size_t(P) * E);
  for (i32& c : counts) c = i32(rng() % 50);
  if (kind == 1) counts[rng() % counts.size()] = -1;
  long long want = 0;
  for (i32 c : counts)
    if (c < 0) want = -1;
  for (int o = 0; o < P && want >= 0; ++o) {
    long long rows = 0;
    for (int s = 0; s < P; ++s)
      for (int l = 0; l < L; ++l) rows += counts[size_t(s) * E + o * L + l];
    if (rows > capacity && rows > want) want = rows;
  }
  std::vector<i64> got(static_cast<size_t>(threads));
  FiberCta cta(seed + 1);
  cta.run(threads, [&] { got[threadIdx.x] = counts_verdict(counts.data(), P, E, L, u64(capacity)); });
  for (int t = 0; t < threads; ++t) expect("verdict on thread", size_t(t), (long long)got[size_t(t)], want);
}

static void place(int threads, int grid, int T, int E, int k, unsigned seed, int skew) {
  std::mt19937 rng(seed);
  std::vector<i32> experts(size_t(T) * k);
  for (int t = 0; t < T; ++t) {  // k distinct experts a token
    std::vector<i32> pick(static_cast<size_t>(E));
    for (int e = 0; e < E; ++e) pick[size_t(e)] = e;
    for (int j = 0; j < k; ++j) {
      std::swap(pick[size_t(j)], pick[size_t(j) + rng() % size_t(E - j)]);
      experts[size_t(t) * k + j] = skew ? j : pick[size_t(j)];
    }
  }
  const int chunks = chunks_of(T);
  std::vector<i32> counts(size_t(chunks) * E, 0);
  for (int p = 0; p < T * k; ++p) ++counts[size_t(p / k / kChunk) * E + experts[size_t(p)]];
  // the reference: the stable counting sort by expert (then token, then j)
  std::vector<i32> want_start(size_t(E) + 1, 0), want_order(size_t(T) * k), want_slot(size_t(T) * k);
  for (int p = 0; p < T * k; ++p) ++want_start[size_t(experts[size_t(p)]) + 1];
  for (int e = 0; e < E; ++e) want_start[size_t(e) + 1] += want_start[size_t(e)];
  std::vector<i32> next(want_start.begin(), want_start.end() - 1);
  for (int p = 0; p < T * k; ++p) {
    const i32 row = next[size_t(experts[size_t(p)])]++;
    want_order[size_t(row)] = p, want_slot[size_t(p)] = row;
  }
  std::vector<i32> order(size_t(T) * k, -7), slot(size_t(T) * k, -7), start(size_t(E) + 1, -7), totals;
  float losses[2] = {1.0f, 1.0f};
  RouteParams r{};
  r.rule.experts = E, r.rule.top_k = k;
  r.experts = experts.data(), r.order = order.data(), r.slot = slot.data(), r.start = start.data();
  r.counts = counts.data(), r.losses = losses, r.tokens = T, r.capacity = -1;
  std::vector<u8> scratch(size_t(place_words(E)) * 4);
  gridDim.x = unsigned(grid);
  for (int b = 0; b < grid; ++b) {
    blockIdx.x = unsigned(b);
    FiberCta cta(seed + unsigned(b));
    cta.run(threads, [&] {
      place_chunks(r, scratch.data(), [&](const i32* s) {
        if (threadIdx.x == 0 && b == grid - 1) totals.assign(s, s + E + 1);
      });
    });
  }
  blockIdx.x = 0, gridDim.x = 1;
  for (size_t i = 0; i < start.size(); ++i) expect("start", i, start[i], want_start[i]);
  for (size_t i = 0; i < totals.size(); ++i) expect("totals_known's start", i, totals[i], want_start[i]);
  if (totals.size() != start.size()) expect("totals_known calls", 0, totals.size(), start.size());
  for (size_t i = 0; i < order.size(); ++i) expect("order", i, order[i], want_order[i]);
  for (size_t i = 0; i < slot.size(); ++i) expect("slot", i, slot[i], want_slot[i]);
  expect("losses zeroed", 0, losses[0] == 0.0f && losses[1] == 0.0f, true);
}

template <class T>
static u64 bits(T v) {
  u64 b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}

static void route(int grid, int T, int E, int k, int score, int groups, int topk_groups, int has_bias, int losses,
                  long long lendable_arg, int ties, unsigned seed) {
  const u32 lendable = lendable_arg >= 0 ? u32(lendable_arg) : staged_route_bytes(E) + u32(lendable_arg + 1);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  // a row stride past E, as the router GEMM's padded output has: odd seeds E + 3, even ones the
  // next multiple of 4 floats past E (16-byte aligned rows where E is a multiple of 4 too)
  const i64 ld = seed % 2 ? E + 3 : (E + 4) / 4 * 4;
  std::vector<float> logits(size_t(std::max(T, 1)) * size_t(ld), std::nanf(""));
  std::vector<float> bias(static_cast<size_t>(E));
  for (int t = 0; t < T; ++t)
    for (int e = 0; e < E; ++e) logits[size_t(t * ld + e)] = ties ? float(rng() % 8) * 0.5f : normal(rng);
  for (float& b : bias) b = normal(rng) * 0.1f;
  RouteRule rule{};
  rule.experts = E, rule.top_k = k, rule.score = score, rule.groups = groups, rule.topk_groups = topk_groups;
  rule.normalize = 1, rule.scaling = 2.5f, rule.bias = has_bias ? bias.data() : nullptr;
  // the reference: one thread a token (route_token), the chunk sums of kosmos_moe_count
  const int chunks = chunks_of(T);
  std::vector<i32> want_ex(size_t(T) * k), want_counts(size_t(chunks) * E, 0);
  std::vector<float> want_w(size_t(T) * k);
  std::vector<double> want_prob(size_t(chunks) * E), want_lse(static_cast<size_t>(chunks));
  for (int t = 0; t < T; ++t) route_token(rule, logits.data() + t * ld, want_ex.data() + t * k, want_w.data() + t * k);
  for (int c = 0; c < chunks; ++c) {
    const int t0 = c * kChunk, n = std::min(kChunk, T - t0);
    for (int e = 0; e < E; ++e) want_counts[size_t(c) * E + e] = chunk_count(want_ex.data() + t0 * k, n * k, e);
    std::vector<TokenNorm> norms(static_cast<size_t>(n));
    double z = 0.0;
    for (int i = 0; i < n; ++i) z += (norms[size_t(i)] = token_norm(rule, logits.data() + (t0 + i) * ld)).lse2;
    for (int e = 0; e < E; ++e)
      want_prob[size_t(c) * E + e] = chunk_prob_sum(rule, logits.data() + t0 * ld, ld, n, norms.data(), e);
    want_lse[size_t(c)] = z;
  }
  // outputs and the lent stages each with a guard band past their end: a write past it shows as
  // a changed guard (kGuard values of -7, or bytes of 0xcd)
  constexpr size_t kGuard = 16;
  std::vector<i32> ex(size_t(T) * k + kGuard, -7), counts(size_t(chunks) * E + kGuard, -7);
  std::vector<float> w(size_t(T) * k + kGuard, -7.0f);
  std::vector<double> prob(size_t(chunks) * E + kGuard, -7.0), lse(size_t(chunks) + kGuard, -7.0);
  RouteParams r{};
  r.rule = rule, r.logits = logits.data(), r.ld = ld, r.experts = ex.data(), r.weights = w.data();
  r.counts = counts.data(), r.tokens = T, r.capacity = -1;
  if (losses) r.prob_sums = prob.data(), r.lse_sq = lse.data();
  const size_t lent = std::max<size_t>(lendable, kRouteScratchBytes);
  std::vector<u8> scratch(lent + kGuard * 4);
  gridDim.x = unsigned(grid);
  for (int b = 0; b < grid; ++b) {
    blockIdx.x = unsigned(b);
    // each CTA's shared memory starts as garbage: nothing one CTA left may stand in for what the
    // next must write itself (the staged bias, say)
    std::fill(scratch.begin(), scratch.end(), u8(0xcd));
    FiberCta cta(seed + unsigned(b));
    cta.run(kRouteThreads, [&] { route_chunks(r, scratch.data(), lendable); });
    for (size_t i = lent; i < scratch.size(); ++i) expect("lent stages' guard", i, int(scratch[i]), 0xcd);
  }
  blockIdx.x = 0, gridDim.x = 1;
  auto check = [](const char* what, const auto& got, const auto& want, auto guard) {
    for (size_t i = 0; i < want.size(); ++i) expect(what, i, bits(got[i]), bits(want[i]));
    for (size_t i = want.size(); i < got.size(); ++i) expect(what, i, bits(got[i]), bits(guard));
  };
  check("experts", ex, want_ex, -7);
  check("weights' bits", w, want_w, -7.0f);
  check("counts", counts, want_counts, -7);
  if (!losses) return;
  check("prob_sums' bits", prob, want_prob, -7.0);
  check("lse_sq's bits", lse, want_lse, -7.0);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string mode = argv[1];
  std::vector<long long> a;
  for (int i = 2; i < argc; ++i) a.push_back(std::atoll(argv[i]));
  if (mode == "scan" && a.size() == 3) scan(int(a[0]), int(a[1]), unsigned(a[2]));
  else if (mode == "verdict" && a.size() == 6) verdict(int(a[0]), int(a[1]), int(a[2]), a[3], unsigned(a[4]), int(a[5]));
  else if (mode == "place" && a.size() == 7) place(int(a[0]), int(a[1]), int(a[2]), int(a[3]), int(a[4]), unsigned(a[5]), int(a[6]));
  else if (mode == "route" && a.size() == 12)
    route(int(a[0]), int(a[1]), int(a[2]), int(a[3]), int(a[4]), int(a[5]), int(a[6]), int(a[7]), int(a[8]),
          a[9], int(a[10]), unsigned(a[11]));
  else return 2;
  std::printf("mismatches %d\n", mismatches);
  return 0;
}
