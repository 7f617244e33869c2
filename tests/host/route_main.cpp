// route_token (hipsrc/kosmos/moe/route.h) on the host. stdin: int32 T, E, L, k, score, groups,
// topk_groups, normalize; float scaling; int32 has_bias; float bias[E] if has_bias; float logits[T][L].
// stdout: int32 experts[T][k], then float weights[T][k].
#include <cstdio>
#include <vector>

#include "kosmos/moe/route.h"

using namespace kosmos::moe;

template <class T>
static bool get(T* p, size_t n) { return fread(p, sizeof(T), n, stdin) == n; }

int main() {
  int h[8], has_bias;
  float scaling;
  if (!get(h, 8) || !get(&scaling, 1) || !get(&has_bias, 1)) return 2;
  const int T = h[0], E = h[1], L = h[2], k = h[3];
  std::vector<float> bias(E), logits(size_t(T) * L);
  if ((has_bias && !get(bias.data(), E)) || !get(logits.data(), logits.size())) return 2;
  const RouteRule rule{E, k, h[4], h[5], h[6], h[7], scaling, 0, has_bias ? bias.data() : nullptr};
  std::vector<int> experts(size_t(T) * k);
  std::vector<float> weights(size_t(T) * k);
  for (int t = 0; t < T; ++t)
    route_token(rule, logits.data() + size_t(t) * L, experts.data() + size_t(t) * k, weights.data() + size_t(t) * k);
  fwrite(experts.data(), 4, experts.size(), stdout);
  fwrite(weights.data(), 4, weights.size(), stdout);
  return 0;
}
