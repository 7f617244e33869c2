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

// A running top-N of (value, index): the best N offered so far, best first, the lower index first
// among equal values (entries are offered in increasing index order); callers read the first k.
// Every loop runs over the compile-time N: the arrays stay in registers (a run-time index put them
// in local memory, 288 B of stack in kosmos_moe_route). A NaN offered ranks as -inf (the rule's,
// kosmos/moe/reference.py alike): the slots are then ordered, so "the value beats slot s" holds
// for every s past the first slot it beats, and each slot's update needs only its own test and the one above --
// independent across slots, a few instructions each. (The shifting form, one slot's test after
// another's, was ~400 dependent instructions an offer at N = 16: one thread's token took 13.6 us
// at Qwen3-30B's share on an H100, notes/moe.md session 40.)
template <int N>
struct TopN {
  float v[N];
  i32 i[N];
  KOSMOS_DEVICE void init() {
#pragma unroll
    for (int s = 0; s < N; ++s) {
      v[s] = -__int_as_float(0x7f800000);  // -inf, with index -1: an empty slot, which any value beats
      i[s] = -1;
    }
  }
  // Every entry the value beats (a greater value, or an empty slot) moves down one slot; the
  // value takes the first slot it beats.
  KOSMOS_DEVICE void offer(float value, i32 index) {
    if (!(value == value)) value = -__int_as_float(0x7f800000);
    bool beats[N];
#pragma unroll
    for (int s = 0; s < N; ++s) beats[s] = value > v[s] || i[s] < 0;
#pragma unroll
    for (int s = N - 1; s >= 0; --s) {
      const bool shift = s > 0 && beats[s > 0 ? s - 1 : 0];
      v[s] = shift ? v[s > 0 ? s - 1 : 0] : beats[s] ? value : v[s];
      i[s] = shift ? i[s > 0 ? s - 1 : 0] : beats[s] ? index : i[s];
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
    best.init();
    for (i32 g = 0; g < r.groups; ++g) {
      TopN<2> two;
      two.init();
      for (i32 e = g * per; e < (g + 1) * per; ++e) two.offer(choice(e), e);
      best.offer(two.v[0] + two.v[1], g);
    }
    allowed = 0;
#pragma unroll
    for (int s = 0; s < kMaxGroups; ++s)
      if (s < r.topk_groups) allowed |= 1u << best.i[s];
  }
  TopN<kMaxTopK> top;
  top.init();
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
