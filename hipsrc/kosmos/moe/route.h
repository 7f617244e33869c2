// The routing rule for one token, one thread: score function, optional group-limited choice,
// top-k with the documented tie rule, combine weights. kosmos/moe/reference.py is the float64
// reference of exactly this rule; both pick, among equal values, the lower expert (or group) index.
//
// The logits row is read a few times (max, sum, group scores, top-k) rather than kept: E is up to
// 384 (Kimi K2), k and the group count are small, so the thread keeps only its k best and the
// group scores in registers.
#pragma once
#include "../platform.h"

namespace kosmos {
namespace moe {

constexpr int kMaxTopK = 16;
constexpr int kMaxGroups = 16;  // group-limited routing: groups of experts (DeepSeek-V3: 8)
constexpr int kChunk = 32;      // tokens per CTA of the dispatch plan's count and place steps

enum Score : i32 { SCORE_SOFTMAX = 0, SCORE_SIGMOID = 1 };

struct RouteRule {
  i32 experts, top_k;
  i32 score;                // Score
  i32 groups, topk_groups;  // groups = 0: no group limit
  i32 normalize;            // 1: the k weights are divided by their sum
  float scaling;
  i32 pad_;
  const float* bias;        // [experts] added to the scores for the choice only, or null
};

// A running top-n of (value, index), best first; `offer` keeps the earlier (lower-index) entry
// among equals, because entries are offered in increasing index order and only a strictly
// greater value moves ahead of an existing one. n <= N is known only at run time, so every loop
// runs over the compile-time N and leaves the slots past n alone: the arrays stay in registers (a
// run-time index put them in local memory, 288 B of stack in kosmos_moe_route, and each offer's
// test was a local load). The slot an offer must beat, n - 1, is kept beside them.
template <int N>
struct TopN {
  float v[N];
  i32 i[N];
  i32 n;
  float tail_v;  // v[n - 1], i[n - 1]
  i32 tail_i;
  // whether `value` moves ahead of the entry (vs, is): a greater value, or an empty slot
  KOSMOS_DEVICE static bool beats(float value, float vs, i32 is) { return value > vs || is < 0; }
  KOSMOS_DEVICE void init(i32 count) {
    n = count;
#pragma unroll
    for (int s = 0; s < N; ++s) {
      v[s] = -__int_as_float(0x7f800000);  // -inf: any finite or -inf value offered later wins a slot
      i[s] = -1;
    }
    tail_v = v[0];
    tail_i = -1;
  }
  // From slot n - 1 up, each entry the value beats moves down one slot; the value takes the
  // slot below the first entry it does not beat (or slot 0).
  KOSMOS_DEVICE void offer(float value, i32 index) {
    if (n == 0 || !beats(value, tail_v, tail_i)) return;
    bool lands = true;  // the value lands in slot s or above it
#pragma unroll
    for (int s = N - 1; s >= 0; --s) {
      if (s >= n || !lands) continue;
      const int up = s > 0 ? s - 1 : 0;  // (slot 0 has none above it)
      const bool above = s > 0 && beats(value, v[up], i[up]);
      v[s] = above ? v[up] : value;
      i[s] = above ? i[up] : index;
      lands = above;
    }
#pragma unroll
    for (int s = 0; s < N; ++s)
      if (s == n - 1) {
        tail_v = v[s];
        tail_i = i[s];
      }
  }
};

struct Scorer {
  const float* row;
  i32 score;
  float max, inv_sum;  // softmax: exp(l - max) / sum
  KOSMOS_DEVICE float operator()(i32 e) const {
    const float l = row[e];
    // unfused: sums of scores (token_norm, a biased choice) must not depend on the kernel
    return score == SCORE_SOFTMAX ? mul_unfused(expf(l - max), inv_sum) : 1.0f / (1.0f + expf(-l));
  }
};

// A logits row's max and sum of exp(l - max): the softmax's normaliser and the logsumexp.
struct RowExp {
  float max, sum;
};
KOSMOS_DEVICE RowExp row_exp(const float* row, i32 n) {
  float m = row[0];
  for (i32 e = 1; e < n; ++e) m = fmaxf(m, row[e]);
  float sum = 0.0f;
  for (i32 e = 0; e < n; ++e) sum += expf(row[e] - m);
  return RowExp{m, sum};
}

// `re`: row_exp of the row (read only for softmax).
KOSMOS_DEVICE Scorer make_scorer(const RouteRule& r, const float* row, const RowExp& re) {
  return r.score == SCORE_SOFTMAX ? Scorer{row, r.score, re.max, 1.0f / re.sum} : Scorer{row, r.score, 0.0f, 1.0f};
}

// row_exp of the row where the rule reads it (softmax), else a placeholder make_scorer ignores.
KOSMOS_DEVICE RowExp rule_row_exp(const RouteRule& r, const float* row) {
  return r.score == SCORE_SOFTMAX ? row_exp(row, r.experts) : RowExp{0.0f, 1.0f};
}

// Route one token: experts[0..k) best first, weights[0..k) their combine weights. `re`: row_exp
// of the row (read only for softmax), when the caller has it (the in-launch routing's token_norm
// needs it too).
KOSMOS_DEVICE void route_token(const RouteRule& r, const float* row, const RowExp& re, i32* experts, float* weights) {
  const Scorer score = make_scorer(r, row, re);
  auto choice = [&](i32 e) { return r.bias ? score(e) + r.bias[e] : score(e); };
  // Group limit: a group's score is the sum of its two best choice values; the best topk_groups
  // groups compete, the others' experts are skipped.
  const bool limited = r.groups && r.topk_groups < r.groups;  // then groups <= kMaxGroups (host-checked)
  const i32 per = limited ? r.experts / r.groups : r.experts;
  u32 allowed = ~0u;  // bit g: group g competes (read only when limited)
  if (limited) {
    TopN<kMaxGroups> best;
    best.init(r.topk_groups);
    for (i32 g = 0; g < r.groups; ++g) {
      TopN<2> two;
      two.init(2);
      for (i32 e = g * per; e < (g + 1) * per; ++e) two.offer(choice(e), e);
      best.offer(two.v[0] + two.v[1], g);
    }
    allowed = 0;
#pragma unroll
    for (int s = 0; s < kMaxGroups; ++s)
      if (s < r.topk_groups) allowed |= 1u << best.i[s];
  }
  TopN<kMaxTopK> top;
  top.init(r.top_k);
  for (i32 e = 0; e < r.experts; ++e)
    if (!limited || (allowed >> (e / per) & 1u)) top.offer(choice(e), e);
  // (loops over the compile-time kMaxTopK, as in TopN: top's slots stay in registers)
  float w[kMaxTopK], sum = 0.0f;
#pragma unroll
  for (int s = 0; s < kMaxTopK; ++s)
    if (s < r.top_k) {
      w[s] = score(top.i[s]);
      sum += w[s];
    }
  const float scale = r.normalize ? r.scaling / sum : r.scaling;
#pragma unroll
  for (int s = 0; s < kMaxTopK; ++s)
    if (s < r.top_k) {
      experts[s] = top.i[s];
      weights[s] = w[s] * scale;
    }
}

KOSMOS_DEVICE void route_token(const RouteRule& r, const float* row, i32* experts, float* weights) {
  route_token(r, row, rule_row_exp(r, row), experts, weights);
}

}  // namespace moe
}  // namespace kosmos
