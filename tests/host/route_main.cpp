// The routing rule and the dispatch plan (hipsrc/kosmos/moe/route.h, plan.h) on the host, each
// kernel's threads run one after another in the kernels' phase order (hipsrc/moe_route.hip).
// Token dropping (capacity >= 0): then kosmos_moe_keep (capacity.h) over `ctas` CTAs of `lanes`
// threads, the CTAs and each phase's lanes in turn.
// stdin: int32 T, E, L, k, score, groups, topk_groups, normalize; float scaling, aux_coef, z_coef;
// int32 has_bias, capacity (-1: dropless), lanes, ctas; float bias[E] if has_bias; float logits[T][L].
// stdout: int32 experts[T][k]; float weights[T][k]; int32 order[T*k], slot[T*k], start[E+1];
// float mean_prob[E], losses[2]; with a capacity, then u8 kept[T*k] (order, slot, start the kept plan's)
// and int32 keep_words(E, lanes) (the shared words the rule took); last, int32 place_words(E) (the
// megakernel's placement words: kosmos.moe.route mirrors both).
#include <cstdio>
#include <vector>

#include "kosmos/moe/capacity.h"
#include "kosmos/moe/plan.h"

using namespace kosmos::moe;

template <class T>
static bool get(T* p, size_t n) { return fread(p, sizeof(T), n, stdin) == n; }
template <class T>
static void put(const std::vector<T>& v) { fwrite(v.data(), sizeof(T), v.size(), stdout); }

struct HostCta {  // capacity.h's CtaPhases, a lane at a time
  int lanes, cta, ctas;
  template <class F>
  void all(F f) const {
    for (int lane = 0; lane < lanes; ++lane) f(lane);
  }
  template <class F>
  void one(F f) const { f(); }
};

int main() {
  int h[8], has_bias, drop[3];
  float f[3];
  if (!get(h, 8) || !get(f, 3) || !get(&has_bias, 1) || !get(drop, 3)) return 2;
  const int T = h[0], E = h[1], L = h[2], k = h[3];
  std::vector<float> bias(E), logits(size_t(T) * L);
  if ((has_bias && !get(bias.data(), E)) || !get(logits.data(), logits.size())) return 2;
  const RouteRule rule{E, k, h[4], h[5], h[6], h[7], f[0], 0, has_bias ? bias.data() : nullptr};
  std::vector<int> experts(size_t(T) * k), order(size_t(T) * k), slot(size_t(T) * k), start(E + 1, 0);
  std::vector<float> weights(size_t(T) * k), mean_prob(E), losses(2, 0.0f);
  for (int t = 0; t < T; ++t)
    route_token(rule, logits.data() + size_t(t) * L, experts.data() + size_t(t) * k, weights.data() + size_t(t) * k);
  const int chunks = chunks_of(T);
  std::vector<int> counts(size_t(chunks) * E), offsets(size_t(chunks) * E);
  std::vector<double> prob_sums(size_t(chunks) * E), lse_sq(chunks);
  for (int c = 0; c < chunks; ++c) {  // kosmos_moe_count's lanes
    const int t0 = c * kChunk, t1 = std::min(t0 + kChunk, T), n = (t1 - t0) * k;
    const int* ex = experts.data() + size_t(t0) * k;
    for (int e = 0; e < E; ++e) counts[size_t(c) * E + e] = chunk_count(ex, n, e);
    std::vector<TokenNorm> norms(t1 - t0);
    for (int t = t0; t < t1; ++t) norms[t - t0] = token_norm(rule, logits.data() + size_t(t) * L);
    for (int e = 0; e < E; ++e)
      prob_sums[size_t(c) * E + e] = chunk_prob_sum(rule, logits.data() + size_t(t0) * L, L, t1 - t0, norms.data(), e);
    double z = 0.0;
    for (int t = t0; t < t1; ++t) z += norms[t - t0].lse2;
    lse_sq[c] = z;
  }
  for (int e = 0; e < E; ++e)
    start[e + 1] = scan_expert(e, E, chunks, T, counts.data(), offsets.data(), prob_sums.data(), mean_prob.data());
  for (int e = 0; e < E; ++e) start[e + 1] += start[e];
  const RouterLosses l = router_losses(E, T, k, start.data(), mean_prob.data(), lse_sq.data(), chunks, f[1], f[2]);
  losses[0] = l.aux;
  losses[1] = l.z;
  for (int e = 0; e < E; ++e)
    for (int c = 0; c < chunks; ++c) offsets[size_t(c) * E + e] += start[e];
  for (int c = 0; c < chunks; ++c) {  // kosmos_moe_place's lanes
    const int t0 = c * kChunk, n = (std::min(t0 + kChunk, T) - t0) * k;
    const int* ex = experts.data() + size_t(t0) * k;
    for (int i = 0; i < n; ++i) {
      const int row = offsets[size_t(c) * E + ex[i]] + rank_in_chunk(ex, i);
      order[row] = size_t(t0) * k + i;
      slot[size_t(t0) * k + i] = row;
    }
  }
  if (drop[0] < 0) {
    put(experts), put(weights), put(order), put(slot), put(start), put(mean_prob), put(losses);
    put(std::vector<int>{place_words(E)});
    return 0;
  }
  const int lanes = drop[1], ctas = drop[2];
  std::vector<int> kept_order(size_t(T) * k, -7), kept_slot(size_t(T) * k, -7), kept_start(E + 1, -7);
  std::vector<unsigned char> kept(size_t(T) * k, 7);
  const KeepArgs a{start.data(), order.data(), weights.data(), kept_order.data(), kept_slot.data(), kept.data(),
                   kept_start.data(), E, drop[0], T * k, 0};
  for (int c = 0; c < ctas; ++c) {  // kosmos_moe_keep's CTAs
    std::vector<int> words(keep_words(E, lanes), -7);
    keep_capacity(a, words.data(), HostCta{lanes, c, ctas});
  }
  put(experts), put(weights), put(kept_order), put(kept_slot), put(kept_start), put(mean_prob), put(losses), put(kept);
  put(std::vector<int>{keep_words(E, lanes), place_words(E)});
  return 0;
}
