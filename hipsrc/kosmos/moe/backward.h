// The experts' part of the MoE backward in one launch (hipsrc/moe_fused_backward_*.hip kosmos_moe_backward_*),
// the forward's mirror (forward.h), on the forward's saved layout (same routing, same counts: the
// backward's arena rows line up with the forward's x_e, a and gate_up rows):
//   0. the router's backward, every warp of the grid a token at a time (router_grads.h): each pair's
//      d w from its expert output (in the forward's combine buffer, or where this rank's own
//      experts' rows stayed: router_grads.h own_runs), then the token's d logits (bf16,
//      the router GEMMs' A); then the grid meets (a count of CTAs), since the combine below pushes
//      dX rows into the same buffer as soon as the dispatch's rows come back;
//   1. dispatch dY: CTAs [0, movers) push each pair's dY row, times its routing weight (d.weights),
//      into the experts' owners' arenas (dispatch.h), then build; the others build at once, and
//      the builders' idle warps push from the same queue beside them (SideDispatch).
//   2. one builder call over ten jobs; a CTA takes a job's tiles until its queue is dry, then the
//      next job's:
//      RW the router's dWr (dense NT, d logits^T x, whole tiles: few and long, so first);
//      RX the router's dx (dense NN, d logits Wr, stored into the fold's fp32 addend c.shared),
//         counting its tiles;
//      SA the shared MLP's dgrad2 + SwiGLU backward (dense NN on dY, nothing to wait for: the CTAs
//         build it while dY lands), counting its tiles;
//      SB the shared MLP's wgrad2 (dense NT, dW2_s = dY^T h_s);
//      A dgrad2 + SwiGLU backward (NN, dA = dY_e W2 in fp32, epilogue d_pre = [dg, du] from the
//        forward's kept [g, u]): waits for the (expert, source) runs its rows overlap; counts its
//        tile rows in rows_done[0, rows_cap);
//      B wgrad2 (NT, dW2_e = dY_e^T a_e over the group's rows): waits for every run of its group;
//      C dgrad1 (NN, dX_e = d_pre W1): waits for A's tile row; counts its own tile rows in
//        rows_done[rows_cap, 2 rows_cap). Not on the crew's CTAs;
//      D wgrad1 (NT, dW1_e = d_pre^T x_e): waits for all of A's tile rows of its group. Not on the
//        crew's CTAs;
//      SC the shared MLP's dgrad1 (dense NN, d_pre_s W1_s added into c.shared once RX has stored the
//         router's dx there: the sums' order is the separate launches') and SD its wgrad1 (dense
//         NT, d_pre_s^T x): wait for all of SA's tiles (long done); SC counts its tiles. Not on
//         the crew's CTAs.
//   3. combine: CTAs [0, crew) push dX rows home as soon as C has finished the tile rows under
//      them (they leave the builder after B), the others join them when SD is dry (rows of this
//      rank's own tokens only wait for C: the fold reads them in place, combine.h own_in_place);
//      then the fold (weights 1: dY was weighted on its way out; c.shared, the router's and the
//      shared MLP's dx in fp32, added before the one rounding), once RX's and SC's tiles are all
//      done.
// No wait closes a cycle while all CTAs are resident: A and B wait for movers, which never wait
// for tiles; C and D for A's tiles, all claimed (by running CTAs) before any CTA leaves A's queue;
// RW and RX wait for the grid's meeting, which every CTA passes before its builder call; SC and SD
// for SA's, claimed before any CTA leaves SA's (SC for RX's too, claimed before any leaves RX's);
// the crew for C's tiles, built by CTAs that wait for nothing but A; the fold for RX's and SC's,
// all claimed before any CTA leaves their queues.
#pragma once
#include "experts.h"
#include "router_grads.h"

namespace kosmos {
namespace moe {

// The shared MLP's four jobs (gemm::JobRecord: more than the kernel's parameters can hold beside the
// routed GEMMs'), in global memory; a job of no tiles (tiles_m 0: no shared MLP, no tokens) is empty.
// EpiW: the weight gradients' store (EpiStoreF32 or EpiStoreBf16).
template <class EpiW>
struct SharedBackward {
  gemm::JobRecord<gemm::EpiSwiGLUBackward> dgrad2;  // SA: d_pre_s [T, 2 Fs] = SwiGLU' (dY W2_s)
  gemm::JobRecord<EpiW> wgrad2;                     // SB: dW2_s [H, Fs] = dY^T h_s
  gemm::JobRecord<gemm::EpiStoreF32> dgrad1;        // SC: c.shared [T, H] += d_pre_s W1_s
  gemm::JobRecord<EpiW> wgrad1;                     // SD: dW1_s [2 Fs, H] = d_pre_s^T x
  KOSMOS_DEVICE void acquire_maps() const {
    dgrad2.acquire_maps();
    wgrad2.acquire_maps();
    dgrad1.acquire_maps();
    wgrad1.acquire_maps();
  }
};

// The router's backward (a job of no tiles and grads.tokens 0: none), in global memory as
// SharedBackward. Mirrored: kosmos/moe/backward.py ROUTER_BACKWARD_DTYPE.
struct RouterBackward {
  gemm::JobRecord<gemm::EpiStoreF32> dw;  // RW: dWr [E_pad, H] = d_logits^T x
  gemm::JobRecord<gemm::EpiStoreF32> dx;  // RX: c.shared [T, H] = d_logits Wr_pad
  RouterGrads grads;                      // d logits [T, E_pad] bf16 for both (grads.d_logits)
  KOSMOS_DEVICE void acquire_maps() const {
    dw.acquire_maps();
    dx.acquire_maps();
  }
};

// Phase 0: the router's backward per token, then the grid meets at *met (every CTA counts itself).
// False: the meeting's wait gave up.
KOSMOS_DEVICE bool router_phase(const RouterGrads& r, u64* met, const WaitCtx& w) {
  if (r.tokens == 0) return true;
  router_grads_all(r);
  __syncthreads();
  __shared__ int s_ok;
  int ok = 1;
  if (threadIdx.x == 0) {
    fence_acq_rel_dev();
    atomic_add_acq_rel_dev(met, 1ull);
    ok = wait_flag_dev(w, SITE_GRID, met, u64(gridDim.x));
  }
  return cta_broadcast(&s_ok, ok) != 0;
}

// Grid, movers, crew, PushUnroll and rows_cap as forward_experts. words[0..1]: A's queue, [2..3]
// B's, [4..5] C's, [6..7] D's, [8..15] SA's, SB's, SC's, SD's, [16..19] RW's, RX's, [20]: CTAs out
// (for the rows_done reset). rows_done: rows_cap counters per routed GEMM, then SA's, SC's and RX's
// finished tiles and the CTAs through phase 0.
template <class Tile, int PushUnroll, class EpiA, class EpiB, class EpiC, class EpiD, class EpiW>
KOSMOS_DEVICE void backward_experts(const ExpertGemm& ga, const EpiA& epi_a, const ExpertGemm& gb, const EpiB& epi_b,
                                    const ExpertGemm& gc, const EpiC& epi_c, const ExpertGemm& gd, const EpiD& epi_d,
                                    const SharedBackward<EpiW>& sh, const RouterBackward& rb,
                                    const DispatchParams& d, const CombineParams& c, i32 movers, i32 crew,
                                    i32 rows_cap, u64* words, u64* rows_done) {
  using namespace gemm;
  extern __shared__ __align__(16) u8 smem[];
  __shared__ GroupTable table;
  u64* shared_done = rows_done + 2 * rows_cap;  // [0]: SA's finished tiles, [1]: SC's, [2]: RX's, [3]: phase 0's CTAs
  phase_mark(0);
  combine_prepare(c);
  bool fine = router_phase(rb.grads, shared_done + 3, d.wait) && dispatch_rows<PushUnroll>(d, movers, smem, &table);
  phase_mark(1);
  if (fine) {
    builder_init(smem);
    phase_mark(2);
    const bool builds_cd = i32(blockIdx.x) >= crew;
    // A: dgrad2 with the SwiGLU backward
    const GroupedSchedule<LAYOUT_NN, Tile> sa{*ga.p, &table};
    QueueClaim claim_a{words, sa.units()};
    const auto arrived_a = runs_arrived<LAYOUT_NN>(d);
    const EpiTileRowDone<EpiA> done_a(epi_a, rows_done, &table);
    // B: wgrad2
    const GroupedSchedule<LAYOUT_NT, Tile> sb{*gb.p, &table};
    QueueClaim claim_b{words + 2, sb.units()};
    const auto arrived_b = runs_arrived<LAYOUT_NT>(d);
    // C: dgrad1, on A's output
    const GroupedSchedule<LAYOUT_NN, Tile> sc{*gc.p, &table};
    QueueClaim claim_c{words + 4, sc.units()};
    const TileRowsDone a_row{rows_done, &table, u64(ga.p->tiles_n), d.wait};
    const EpiTileRowDone<EpiC> done_c(epi_c, rows_done + rows_cap, &table);
    // D: wgrad1, on A's output
    const GroupedSchedule<LAYOUT_NT, Tile> sd{*gd.p, &table};
    QueueClaim claim_d{words + 6, sd.units()};
    const GroupTilesDone a_group{rows_done, &table, u64(ga.p->tiles_n), d.wait};
    // the shared MLP's and the router's jobs (dense: one tile grid each)
    const DenseSchedule<Tile> ssa{sh.dgrad2.p}, ssb{sh.wgrad2.p}, ssc{sh.dgrad1.p}, ssd{sh.wgrad1.p};
    QueueClaim claim_sa{words + 8, work_units(sh.dgrad2.p)}, claim_sb{words + 10, work_units(sh.wgrad2.p)};
    QueueClaim claim_sc{words + 12, work_units(sh.dgrad1.p)}, claim_sd{words + 14, work_units(sh.wgrad1.p)};
    QueueClaim claim_rw{words + 16, work_units(rb.dw.p)}, claim_rx{words + 18, work_units(rb.dx.p)};
    const DenseSchedule<Tile> srw{rb.dw.p}, srx{rb.dx.p};
    const AlwaysReady always;
    // (phase 0's meeting is behind every CTA: a formality, with the proxy fence the hook brings)
    const CountReached met{shared_done + 3, rb.grads.tokens ? u64(gridDim.x) : 0, d.wait};
    const auto epi_rw = with_tma(rb.dw.epi, &rb.dw.c);
    const EpiCountDone<EpiStoreF32Tma> done_rx(with_tma(rb.dx.epi, &rb.dx.c), shared_done + 2);
    const CountReached rx_done{shared_done + 2, u64(claim_rx.units), d.wait};
    const CountReached sa_done{shared_done, u64(claim_sa.units), d.wait};
    const BothReady<CountReached, CountReached> sc_ready{sa_done, rx_done};
    const EpiCountDone<EpiSwiGLUBackward> done_sa(sh.dgrad2.epi, shared_done);
    const auto epi_sb = with_tma(sh.wgrad2.epi, &sh.wgrad2.c);
    const EpiCountDone<EpiAccumulateF32Tma> done_sc(EpiAccumulateF32Tma(EpiAccumulateF32(sh.dgrad1.epi), &sh.dgrad1.c),
                                                    shared_done + 1);
    const auto epi_sd = with_tma(sh.wgrad1.epi, &sh.wgrad1.c);
    sh.acquire_maps();
    rb.acquire_maps();
    const auto job_rw = builder_job<LAYOUT_NT>(srw, &rb.dw.a, &rb.dw.b, claim_rw, met, epi_rw);
    const auto job_rx = builder_job<LAYOUT_NN>(srx, &rb.dx.a, &rb.dx.b, claim_rx, met, done_rx);
    const auto job_sa = builder_job<LAYOUT_NN>(ssa, &sh.dgrad2.a, &sh.dgrad2.b, claim_sa, always, done_sa);
    const auto job_sb = builder_job<LAYOUT_NT>(ssb, &sh.wgrad2.a, &sh.wgrad2.b, claim_sb, always, epi_sb);
    const auto job_a = builder_job<LAYOUT_NN>(sa, ga.a, ga.b, claim_a, arrived_a, done_a);
    const auto job_b = builder_job<LAYOUT_NT>(sb, gb.a, gb.b, claim_b, arrived_b, epi_b);
    const auto job_c = builder_job<LAYOUT_NN>(sc, gc.a, gc.b, claim_c, a_row, done_c, builds_cd);
    const auto job_d = builder_job<LAYOUT_NT>(sd, gd.a, gd.b, claim_d, a_group, epi_d, builds_cd);
    const auto job_sc = builder_job<LAYOUT_NN>(ssc, &sh.dgrad1.a, &sh.dgrad1.b, claim_sc, sc_ready, done_sc, builds_cd);
    const auto job_sd = builder_job<LAYOUT_NT>(ssd, &sh.wgrad1.a, &sh.wgrad1.b, claim_sd, sa_done, epi_sd, builds_cd);
    fine = run_builder_jobs_beside(smem, SideDispatch{d, side_pushes(movers)}, job_rw, job_rx, job_sa, job_sb, job_a,
                                   job_b, job_c, job_d, job_sc, job_sd);
    phase_mark(8);
    // a dX row is final once every tile row under it has all of C's tiles; the fold also reads
    // RX's and SC's sums
    const CountReached sc_done{shared_done + 1, u64(claim_sc.units), d.wait};
    __shared__ int s_ok;
    combine_rows<PushUnroll>(fine, c, d, &table, rows_done + rows_cap, u64(gc.p->tiles_n), [&] {
      return cta_broadcast(&s_ok, threadIdx.x == 0 ? int(rx_done.reached() && sc_done.reached()) : 1) != 0;
    });
    phase_mark(9);
  } else {
    combine_nan(c);  // after a failed wait too: this rank's call has failed (the host raises)
  }
  for (int q = 0; q < 10; ++q) queue_exit(words + 2 * q);
  zero_when_last_out(words + 20, rows_done, 2 * rows_cap + 4);
}

}  // namespace moe
}  // namespace kosmos
