// Token dropping (MoEConfig.capacity_factor): each expert keeps its `capacity` pairs of highest
// combine weight, the lower pair index first among equal weights (reference.capacity_keep), and
// the dispatch plan is compacted over the kept pairs in its own order (expert-major, then pair).
//
// One CTA an expert over cap: a radix select finds the capacity-th largest weight K (four 8-bit
// digits of an order-keeping key, a shared histogram a digit); the rows above K are kept, and of
// the rows equal to K the first ones in row order (plan order is pair order within an expert).
// Two exclusive scans over per-thread runs of rows give the tie ranks and the kept rows' places.
// Every step counts integers, so the result is the same whatever the thread count or schedule.
// hipsrc/moe_route.hip (kosmos_moe_keep, route()) and router.h (the forward's launch) run it;
// tests/host/route_main.cpp runs its lanes one after another.
#pragma once
#include "../platform.h"

namespace kosmos {
namespace moe {

struct KeepArgs {
  const i32* start_all;  // [E + 1] the plan of every chosen pair (rows of expert e: start_all[e]..[e + 1])
  const i32* order_all;  // [T k] its rows: row -> pair t k + j
  const float* weights;  // [T k] the pairs' combine weights
  i32* order;            // [T k] the kept plan: row -> pair; -1 past start[E]
  i32* slot;             // [T k] pair -> kept row, or -1 (dropped)
  u8* kept;              // [T k] 1: kept, 0: dropped
  i32* start;            // [E + 1] the kept plan's
  i32 experts, capacity, pairs, pad_;
};

// Unsigned keys in the floats' order, as the reference's sort ranks them: -0 as +0, and every NaN
// below -inf (numpy sorts NaN last, so it is dropped first), NaNs equal (bit tests: no fast-math
// rewrite can skip them).
KOSMOS_DEVICE u32 weight_key(float w) {
  u32 b = __float_as_uint(w);
  if ((b & 0x7fffffffu) > 0x7f800000u) return 0u;
  if ((b & 0x7fffffffu) == 0u) b = 0u;
  return b >> 31 ? ~b : b | 0x80000000u;
}

KOSMOS_DEVICE u32 pair_key(const KeepArgs& a, i32 row) { return weight_key(a.weights[a.order_all[row]]); }

// One thread: the kept plan's prefix (each expert keeps min(its pairs, capacity)).
KOSMOS_DEVICE void kept_starts(const KeepArgs& a, i32* start) {
  start[0] = 0;
  for (i32 e = 0; e < a.experts; ++e)
    start[e + 1] = start[e] + min(a.start_all[e + 1] - a.start_all[e], a.capacity);
}

// The select's state after the digits above `shift`: the keys whose digits so far equal
// prefix's; the want-th largest of them is the one sought.
struct Select {
  u32 prefix;
  i32 want;
};

KOSMOS_DEVICE bool in_select(u32 key, const Select& s, int shift) {
  return (u64(key ^ s.prefix) >> (shift + 8)) == 0;  // (u64: a shift by 32 on the first digit)
}

// Lane `lane` of `lanes`: the digit histogram of the rows [r0, r0 + n) still in the select.
KOSMOS_DEVICE void count_digits(const KeepArgs& a, i32 r0, i32 n, i32 lane, i32 lanes, const Select& s, int shift,
                                i32* hist) {
  for (i32 i = lane; i < n; i += lanes) {
    const u32 key = pair_key(a, r0 + i);
    if (in_select(key, s, shift)) atomicAdd(&hist[(key >> shift) & 255u], 1);
  }
}

// One thread, after count_digits: the digit holding the want-th largest key.
KOSMOS_DEVICE void pick_digit(const i32* hist, Select& s, int shift) {
  i32 b = 255;
  for (; b > 0 && s.want > hist[b]; --b) s.want -= hist[b];
  s.prefix |= u32(b) << shift;
}

// Lane `lane`'s run of an expert's n rows (contiguous: the scans below rank runs in row order).
KOSMOS_DEVICE void run_of(i32 n, i32 lane, i32 lanes, i32& lo, i32& hi) {
  const i32 per = (n + lanes - 1) / lanes;
  lo = min(n, lane * per);
  hi = min(n, lo + per);
}

// Rows of the run [lo, hi) whose key is K (the threshold).
KOSMOS_DEVICE i32 run_ties(const KeepArgs& a, i32 r0, i32 lo, i32 hi, u32 K) {
  i32 n = 0;
  for (i32 i = lo; i < hi; ++i) n += pair_key(a, r0 + i) == K;
  return n;
}

// The run's kept rows: above K, or equal to K among the first `ties` such rows of the expert
// (ties_before of them are in earlier runs). write: also place them at k0 + kept_before + ...,
// and mark every pair of the run kept or dropped.
KOSMOS_DEVICE i32 run_keep(const KeepArgs& a, i32 r0, i32 lo, i32 hi, u32 K, i32 ties, i32 ties_before,
                           i32 kept_before, i32 k0, bool write) {
  i32 n = 0;
  for (i32 i = lo; i < hi; ++i) {
    const i32 p = a.order_all[r0 + i];
    const u32 key = weight_key(a.weights[p]);
    const bool keep = key > K || (key == K && ties_before++ < ties);
    if (write) {
      a.slot[p] = keep ? k0 + kept_before + n : -1;
      a.kept[p] = keep;
      if (keep) a.order[k0 + kept_before + n] = p;
    }
    n += keep;
  }
  return n;
}

// One thread: an exclusive prefix sum in place.
KOSMOS_DEVICE void exclusive_scan(i32* v, i32 n) {
  i32 run = 0;
  for (i32 i = 0; i < n; ++i) {
    const i32 x = v[i];
    v[i] = run;
    run += x;
  }
}

// Shared words keep_capacity needs: kept starts [E + 1], histogram [256], two scans [lanes], Select.
KOSMOS_DEVICE constexpr i32 keep_words(i32 experts, i32 lanes) { return experts + 1 + 256 + 2 * lanes + 4; }

// A CTA's threads as phases: all(f) runs f(lane) on every thread, one(f) runs f() on thread 0,
// each followed by a barrier. State between phases lives in shared memory only, so a host harness
// can run the lanes of a phase one after another (tests/host/route_main.cpp).
struct CtaPhases {
  i32 lanes, cta, ctas;
  KOSMOS_DEVICE static CtaPhases here() { return CtaPhases{i32(blockDim.x), i32(blockIdx.x), i32(gridDim.x)}; }
  template <class F>
  KOSMOS_DEVICE void all(F f) const {
    f(i32(threadIdx.x));
    __syncthreads();
  }
  template <class F>
  KOSMOS_DEVICE void one(F f) const {
    if (threadIdx.x == 0) f();
    __syncthreads();
  }
};

// Expert e's rows of the kept plan (the kept starts in kstart).
template <class Cta>
KOSMOS_DEVICE void keep_expert(const KeepArgs& a, const i32* kstart, i32 e, i32* hist, i32* ties_before,
                               i32* kept_before, Select* sel, const Cta& cta) {
  const i32 r0 = a.start_all[e], n = a.start_all[e + 1] - r0, k0 = kstart[e], lanes = cta.lanes;
  if (n <= a.capacity) {  // keeps them all, in plan order
    cta.all([&](i32 lane) {
      for (i32 i = lane; i < n; i += lanes) {
        const i32 p = a.order_all[r0 + i];
        a.order[k0 + i] = p;
        a.slot[p] = k0 + i;
        a.kept[p] = 1;
      }
    });
    return;
  }
  cta.one([&] { *sel = Select{0u, a.capacity}; });
  for (int shift = 24; shift >= 0; shift -= 8) {
    cta.all([&](i32 lane) {
      for (i32 b = lane; b < 256; b += lanes) hist[b] = 0;
    });
    cta.all([&](i32 lane) { count_digits(a, r0, n, lane, lanes, *sel, shift, hist); });
    cta.one([&] { pick_digit(hist, *sel, shift); });
  }
  cta.all([&](i32 lane) {
    i32 lo, hi;
    run_of(n, lane, lanes, lo, hi);
    ties_before[lane] = run_ties(a, r0, lo, hi, sel->prefix);
  });
  cta.one([&] { exclusive_scan(ties_before, lanes); });
  cta.all([&](i32 lane) {
    i32 lo, hi;
    run_of(n, lane, lanes, lo, hi);
    kept_before[lane] = run_keep(a, r0, lo, hi, sel->prefix, sel->want, ties_before[lane], 0, k0, false);
  });
  cta.one([&] { exclusive_scan(kept_before, lanes); });
  cta.all([&](i32 lane) {
    i32 lo, hi;
    run_of(n, lane, lanes, lo, hi);
    run_keep(a, r0, lo, hi, sel->prefix, sel->want, ties_before[lane], kept_before[lane], k0, true);
  });
}

// Every CTA of the grid (experts grid-stride over CTAs): the kept plan from the whole one. words:
// keep_words(E, lanes) shared i32. The caller orders what reads the kept plan after it.
template <class Cta>
KOSMOS_DEVICE void keep_capacity(const KeepArgs& a, i32* words, const Cta& cta) {
  const i32 E = a.experts, lanes = cta.lanes;
  i32* kstart = words;
  i32* hist = kstart + E + 1;
  i32* ties_before = hist + 256;
  i32* kept_before = ties_before + lanes;
  Select* sel = reinterpret_cast<Select*>(kept_before + lanes);
  cta.one([&] { kept_starts(a, kstart); });
  cta.all([&](i32 lane) {
    if (cta.cta == 0)
      for (i32 e = lane; e <= E; e += lanes) a.start[e] = kstart[e];
    for (i32 row = kstart[E] + cta.cta * lanes + lane; row < a.pairs; row += cta.ctas * lanes) a.order[row] = -1;
  });
  for (i32 e = cta.cta; e < E; e += cta.ctas) keep_expert(a, kstart, e, hist, ties_before, kept_before, sel, cta);
}

}  // namespace moe
}  // namespace kosmos
