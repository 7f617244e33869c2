// One builder job: what a builder call computes (schedule, operand maps) and how it is fed (claim,
// readiness hook) and finished (epilogue); tile.h's run_builder takes one, run_builder_pair two.
// It holds references: build it from named objects that outlive the call.
#pragma once
#include "config.h"

namespace kosmos {
namespace gemm {

template <int L, class SchedT, class ClaimT, class ReadyT, class EpiT>
struct BuilderJob {
  static constexpr int kLayout = L;
  typedef SchedT Sched;
  typedef ReadyT Ready;
  typedef EpiT Epi;
  const Sched& sched;
  const TensorMap* tma;
  const TensorMap* tmb;
  ClaimT& claim;
  const Ready& ready;
  const Epi& epi;
};

// No second job (run_builder): the pair's second half is not compiled.
struct NoJob {};
template <class Job> struct IsJob {
  static constexpr bool value = true;
};
template <> struct IsJob<NoJob> {
  static constexpr bool value = false;
};

template <int L, class Sched, class Claim, class Ready, class Epi>
KOSMOS_DEVICE BuilderJob<L, Sched, Claim, Ready, Epi> builder_job(const Sched& sched, const TensorMap* tma,
                                                                  const TensorMap* tmb, Claim& claim,
                                                                  const Ready& ready, const Epi& epi) {
  return BuilderJob<L, Sched, Claim, Ready, Epi>{sched, tma, tmb, claim, ready, epi};
}

}  // namespace gemm
}  // namespace kosmos
