// One CTA on the host: its blockDim.x threads as user-level contexts on one OS thread, each run
// until it blocks -- at a __syncthreads, until every live thread has arrived, or at a warp shuffle,
// until every live lane of its warp has posted -- then a runnable one picked at random (seeded:
// runs of several seeds interleave the threads differently, so a missing barrier shows as a wrong
// value rather than hiding behind one fixed order; threadIdx.x follows the running thread). The
// shim's __shared__ variables are static: one CTA's shared memory. A state no thread can leave (a
// barrier some threads skip, a shuffle some lanes skip) is reported and aborts.
#pragma once
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "kosmos/platform.h"

struct FiberCta : HostLockstep, HostBarrier {
  enum State { kRunnable, kAtBarrier, kAtShuffle, kDone };

  explicit FiberCta(unsigned seed) : rng_(seed) {}

  // Runs body() on `threads` threads (blockIdx / gridDim as the caller set them).
  void run(int threads, std::function<void()> body) {
    n_ = threads;
    body_ = std::move(body);
    ctx_.assign(n_, ucontext_t{});
    stacks_.assign(n_, std::vector<char>(kStackBytes));
    state_.assign(n_, kRunnable);
    posted_.assign(n_, 0u), result_.assign(n_, 0u), src_.assign(n_, 0), shuffles_.assign(n_, 0);
    at_barrier_ = 0, live_ = n_, current_ = 0;
    running_ = this, host_lockstep = this, host_barrier = this;
    blockDim.x = unsigned(n_);
    for (int t = 0; t < n_; ++t) {
      getcontext(&ctx_[t]);
      ctx_[t].uc_stack.ss_sp = stacks_[t].data();
      ctx_[t].uc_stack.ss_size = stacks_[t].size();
      ctx_[t].uc_link = nullptr;
      makecontext(&ctx_[t], entry, 0);
    }
    threadIdx.x = 0;
    swapcontext(&main_, &ctx_[0]);
    host_lockstep = nullptr, host_barrier = nullptr;
  }

  int lane() const override { return current_ % kosmos::kWarpSize; }

  // The shuffles thread t took in the last run: a warp's lanes in step took as many each (a lane
  // that skipped one meets its partners at their next shuffle instead, unnoticed otherwise).
  long shuffles(int t) const { return shuffles_[size_t(t)]; }

  void barrier() override {
    state_[current_] = kAtBarrier;
    if (++at_barrier_ == live_) release_barrier();
    yield();
  }

  unsigned shuffle(unsigned v, int src_lane) override {
    const int me = current_, w0 = me - me % kosmos::kWarpSize;
    posted_[me] = v, src_[me] = w0 + src_lane, state_[me] = kAtShuffle;
    ++shuffles_[me];
    release_shuffle(w0);
    yield();
    return result_[me];
  }

 private:
  static constexpr size_t kStackBytes = 1 << 16;
  static inline FiberCta* running_ = nullptr;  // makecontext passes no pointer portably

  static void entry() {
    running_->body_();
    running_->finish();
  }

  void release_barrier() {
    for (State& s : state_)
      if (s == kAtBarrier) s = kRunnable;
    at_barrier_ = 0;
  }

  // Once every live lane of the warp starting at w0 has posted, each gets its source lane's value.
  void release_shuffle(int w0) {
    const int w1 = std::min(w0 + kosmos::kWarpSize, n_);
    bool waiting = false;
    for (int t = w0; t < w1; ++t) {
      if (state_[t] == kRunnable || state_[t] == kAtBarrier) return;
      waiting |= state_[t] == kAtShuffle;
    }
    if (!waiting) return;
    for (int t = w0; t < w1; ++t)
      if (state_[t] == kAtShuffle) result_[t] = posted_[src_[t]], state_[t] = kRunnable;
  }

  void finish() {
    state_[current_] = kDone;
    --live_;
    if (live_ > 0 && at_barrier_ == live_) release_barrier();
    release_shuffle(current_ - current_ % kosmos::kWarpSize);
    yield();
  }

  void yield() {
    runnable_.clear();
    for (int t = 0; t < n_; ++t)
      if (state_[t] == kRunnable) runnable_.push_back(t);
    if (!runnable_.empty()) {
      const int me = current_, next = runnable_[rng_() % runnable_.size()];
      current_ = next;
      threadIdx.x = unsigned(next);
      if (next != me) swapcontext(&ctx_[me], &ctx_[next]);
      return;
    }
    if (live_ == 0) {
      swapcontext(&ctx_[current_], &main_);  // (never resumed)
      return;
    }
    std::fprintf(stderr, "fiber_cta: deadlock:");
    for (int t = 0; t < n_; ++t)
      if (state_[t] != kDone) std::fprintf(stderr, " %d@%s", t, state_[t] == kAtBarrier ? "barrier" : "shuffle");
    std::fprintf(stderr, "\n");
    std::abort();
  }

  int n_ = 0, at_barrier_ = 0, live_ = 0, current_ = 0;
  std::function<void()> body_;
  std::vector<ucontext_t> ctx_;
  ucontext_t main_{};
  std::vector<std::vector<char>> stacks_;
  std::vector<State> state_;
  std::vector<unsigned> posted_, result_;
  std::vector<int> src_, runnable_;
  std::vector<long> shuffles_;
  std::mt19937 rng_;
};
