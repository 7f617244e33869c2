// The MoE dispatch: the per-expert counts cross ranks through the symmetric heap, every rank lays
// out every owner's receive arena from them, and movers push each token row straight to its final
// place there (expert-major over the owner's experts, source-major inside an expert, this rank's
// dispatch order inside a source). Per (expert, source) run, the last item pushed releases the
// run's arrival flag at the owner: what a gated GEMM tile waits for (gemm::RunsArrived).
//
// Heap (every rank, symmetric offsets): counts[2][kMaxWorld][E] i32 (call parity, source, expert),
// arrived[E_loc][kMaxWorld] u64 (local expert, source), the arena [capacity][row_bytes].
// Protocol, all flags epoch-valued and never reset:
//   1. a rank writes its counts into slot parity of every rank (itself too), then sets ready[me]
//      there; a peer's counts for call e therefore also say it has started call e, so it is done
//      with call e-1 (its arena was read by the GEMMs before this launch, on its stream), and the
//      parity slot we write was last read in call e-2, which every peer finished before we saw its
//      counts for e-1;
//   2. every CTA waits for all ranks' counts (the dispatch's only cross-rank barrier);
//   3. items (expert g, chunk of item_rows rows) from a per-call queue; an item's rows are gathered
//      (row i of the dispatch order is token order[i] / k) and copied together (cta_copy_rows);
//   4. the owner (standalone kernel) waits for every non-empty run aimed at it before it exits, so
//      the next launch on its stream reads a complete arena.
#pragma once
#include "../calls.h"
#include "../cta.h"
#include "../flags.h"
#include "../bulk_rows.h"
#include "../protocol.h"
#include "../trace.h"
#include "../wait.h"
#include "items.h"
#include "layout.h"

namespace kosmos {
namespace moe {

struct DispatchParams {
  const u64* peer_bases;
  WaitCtx wait;
  u64* calls;  // [2] the plan's call count: this call's epoch (calls.h)
  u64 flags_off;
  u64 counts_off, arrived_off, arena_off;  // heap offsets (every rank)
  u64 row_bytes, capacity;                 // arena rows
  const i32* start;       // [E + 1] this rank's dispatch plan (kosmos.moe.route: DeviceRouting.start)
  const i32* order;       // [T * k] row -> t * k + j
  const u8* x;            // [T][row_bytes] this rank's tokens
  const float* weights;   // [T * k] or nullptr: each pushed row (bf16) times its pair's weight, rounded
                          // once (the backward's router-weighted dY rows)
  u64* run_done;          // [2][E] local: items finished per expert run, call parity (reset per call)
  i32* group_rows;        // [E_loc] out: rows of each local expert
  i32* run_rows;          // [E_loc][world] out: rows of (local expert, source)
  i32* all_counts;        // [world][E] out: every rank's counts of this call (the combine's layout)
  i64* status;            // [1] out: 0; the rows an owner would receive past capacity; or -1: a rank
                          // refused its input on the host (it sends counts of -1). Either way nothing moves.
  i32* item_tables;       // [2E + 1] local: my_base[E], chunk_start[E + 1] of this call, for the side
                          // pushes (SideDispatch), written by CTA 0 ...
  u64* tables_ready;      // [1] local: ... which then releases the call's epoch here
  i32 rank, world, experts, e_loc, top_k, item_rows;
  i32 refused;            // 1: this rank refused its input (start, order and x are not read)
};

// Shared memory: counts[world][E] of this call, then my_base[E] (where my run of expert g starts in
// its owner's arena), then chunk_start[E + 1] (the item prefix over my runs).
KOSMOS_DEVICE u64 dispatch_smem_bytes(i32 world, i32 experts) { return u64(world * experts + 2 * experts + 1) * 4; }

KOSMOS_DEVICE i32 chunks_of_run(const DispatchParams& d, i32 g) {
  const i32 n = d.start[g + 1] - d.start[g];
  return (n + d.item_rows - 1) / d.item_rows;
}

KOSMOS_DEVICE i32* counts_slot(const DispatchParams& d, int owner, int source) {
  return reinterpret_cast<i32*>(d.peer_bases[owner] + d.counts_off) +
         (i64(call_epoch() & 1) * kMaxWorld + source) * d.experts;
}

KOSMOS_DEVICE u64* arrived_flag(const DispatchParams& d, int owner, i32 local_expert, int source) {
  return reinterpret_cast<u64*>(d.peer_bases[owner] + d.arrived_off) + i64(local_expert) * kMaxWorld + source;
}

// 1. One CTA (all threads; dispatch_plan: CTA 0): my counts (rows_of(g): rows I send expert g) to
// every rank (itself too), then my ready flag there; and the next call's run counters zeroed (the
// call that last used them has finished).
template <class RowsOf>
KOSMOS_DEVICE void publish_counts(const DispatchParams& d, const RowsOf& rows_of) {
  const i32 P = d.world, E = d.experts, me = d.rank;
  for (i32 g = threadIdx.x; g < E; g += blockDim.x) d.run_done[i64((call_epoch() + 1) & 1) * E + g] = 0;
  for (int o = 0; o < P; ++o)
    for (i32 g = threadIdx.x; g < E; g += blockDim.x) counts_slot(d, o, me)[g] = d.refused ? -1 : rows_of(g);
  __syncthreads();
  if (threadIdx.x == 0) {
    fence_acq_rel_sys();
    for (int o = 0; o < P; ++o) st_release_sys(&flags_of(d.peer_bases, o, d.flags_off)->ready[me], call_epoch());
  }
}

// 2. Every CTA: everybody's counts of this call are in my slot (the dispatch's only cross-rank
// barrier). False (on every thread): a wait gave up.
KOSMOS_DEVICE bool wait_counts(const DispatchParams& d) {
  __shared__ int s_ok;
  OpFlags* mine = flags_of(d.peer_bases, d.rank, d.flags_off);
  int ok = 1;
  if (threadIdx.x == 0)
    for (int s = 0; s < d.world && ok; ++s) ok = wait_flag_sys(d.wait, SITE_PEER_READY, &mine->ready[s], call_epoch());
  return cta_broadcast(&s_ok, ok);
}

// All threads, after wait_counts: this call's counts [P][E] (counts[s * E + g]: rows s sends to g)
// from my heap slot into `counts` (shared memory), and their verdict, the same on every rank: 0;
// -1, a rank refused its input; or the rows an owner would receive past the capacity. (Relaxed
// system-scope loads: a plain load could hit a stale copy from the slot's previous use.)
KOSMOS_DEVICE i64 load_counts(const DispatchParams& d, i32* counts) {
  const i32 P = d.world, E = d.experts;
  const i32* slot = counts_slot(d, d.rank, 0);
  for (i32 v = threadIdx.x; v < P * E; v += blockDim.x)
    counts[v] = i32(ld_relaxed_sys_u32(reinterpret_cast<const u32*>(slot + v)));
  __syncthreads();
  return counts_verdict(counts, P, E, d.e_loc, d.capacity);  // layout.h
}

// The dispatch up to its pushes: the counts exchange, the verdict, the owner side's outputs (CTA 0)
// and this call's item tables, in the dynamic shared memory (dispatch_smem_bytes): counts[P][E],
// my_base[E] (where my run of expert g starts in its owner's arena), chunk_start[E + 1] (the item
// prefix over my runs). False when a wait gave up or the verdict stopped the call (nothing moves,
// outputs zeroed). publish false: this launch published the counts already (the fused forward's
// routing, as soon as it had them: forward.h).
KOSMOS_DEVICE bool dispatch_plan(const DispatchParams& d, bool publish) {
  extern __shared__ __align__(16) u8 dispatch_smem[];
  const i32 P = d.world, E = d.experts, me = d.rank;
  i32* counts = reinterpret_cast<i32*>(dispatch_smem);  // [P][E]
  i32* my_base = counts + P * E;                         // [E]
  i32* chunk_start = my_base + E;                        // [E + 1]
  // First, whatever the verdict: CTA 0 zeroes the next call's queue heads here (flags.h)
  fused_heads(flags_of(d.peer_bases, me, d.flags_off), call_epoch());
  if (blockIdx.x == 0 && publish) publish_counts(d, [&](i32 g) { return d.start[g + 1] - d.start[g]; });
  if (!wait_counts(d)) return false;
  const i64 worst = load_counts(d, counts);
  if (blockIdx.x == 0 && threadIdx.x == 0) d.status[0] = worst;
  if (worst != 0) {
    if (blockIdx.x == 0) {  // no stale layout for whoever reads these without checking the status
      for (i32 v = threadIdx.x; v < P * E; v += blockDim.x) d.all_counts[v] = 0;
      for (i32 v = threadIdx.x; v < d.e_loc * P; v += blockDim.x) d.run_rows[v] = 0;
      for (i32 v = threadIdx.x; v < d.e_loc; v += blockDim.x) d.group_rows[v] = 0;
    }
    return false;
  }
  for (i32 g = threadIdx.x; g < E; g += blockDim.x) {
    my_base[g] = arena_row(counts, P, E, d.e_loc, g, me);  // layout.h
    chunk_start[g + 1] = chunks_of_run(d, g);
  }
  if (threadIdx.x == 0) chunk_start[0] = 0;
  __syncthreads();
  cta_inclusive_scan(chunk_start + 1, E);
  // The owner side's outputs: the grouped GEMM's counts, the readiness hook's runs, and every
  // rank's counts for the combine.
  if (blockIdx.x == 0) {
    for (i32 v = threadIdx.x; v < P * E; v += blockDim.x) d.all_counts[v] = counts[v];
    for (i32 v = threadIdx.x; v < d.e_loc * P; v += blockDim.x) {
      const i32 l = v / P, s = v % P;
      d.run_rows[v] = counts[s * E + me * d.e_loc + l];
      if (s == 0) d.group_rows[l] = i32(expert_rows(counts, P, E, d.e_loc, me, l));  // <= capacity
    }
  }
  __syncthreads();
  if (blockIdx.x == 0 && d.item_tables != nullptr) {  // for the side pushes (SideDispatch)
    for (i32 v = threadIdx.x; v < 2 * E + 1; v += blockDim.x) d.item_tables[v] = my_base[v];
    __syncthreads();
    if (threadIdx.x == 0) {
      fence_acq_rel_dev();
      st_release_sys(d.tables_ready, call_epoch());
    }
  }
  return true;
}

// Item `item` of this call (3.): rows [first, last) of my dispatch order, all of run g (owner o),
// gathered (row i is token order[i] / k) to consecutive rows from dst in o's arena.
struct DispatchItem {
  i32 g, o, first, last;
  u8* dst;
};
KOSMOS_DEVICE DispatchItem dispatch_item(const DispatchParams& d, const i32* my_base, const i32* chunk_start, i64 item) {
  DispatchItem it;
  it.g = run_of(chunk_start, d.experts, item);
  it.o = it.g / d.e_loc;
  it.first = d.start[it.g] + (i32(item) - chunk_start[it.g]) * d.item_rows;
  it.last = min(it.first + d.item_rows, d.start[it.g + 1]);
  it.dst = reinterpret_cast<u8*>(d.peer_bases[it.o] + d.arena_off) + u64(my_base[it.g] + it.first - d.start[it.g]) * d.row_bytes;
  return it;
}

// Copies item `it` by the whole CTA through the staging area (bulk_rows.h), each row times its
// pair's weight if d.weights.
template <int Unroll>
KOSMOS_DEVICE void cta_copy_item(const DispatchParams& d, const DispatchItem& it, Stage stage) {
  const auto src = [&](u32 r) { return d.x + u64(d.order[it.first + i32(r)] / d.top_k) * d.row_bytes; };
  const u32 rows = u32(it.last - it.first), row_bytes = u32(d.row_bytes);
  if (d.weights == nullptr) {
    bulk_copy_rows<Unroll>(stage.at, stage.bytes, it.dst, src, rows, row_bytes);
  } else {
    bulk_copy_rows<Unroll>(stage.at, stage.bytes, it.dst, src, rows, row_bytes,
                           [&](u32 r, vec16& v) { v = scale_bf16x8(v, d.weights[d.order[it.first + i32(r)]]); });
  }
}

// The same by one warp, row by row (its lanes: 32 x Unroll vectors in flight).
template <int Unroll>
KOSMOS_DEVICE void warp_copy_item(const DispatchParams& d, const DispatchItem& it, u32 lane) {
  const u32 row_bytes = u32(d.row_bytes);
  u8* dst = it.dst;
  for (i32 i = it.first; i < it.last; ++i, dst += row_bytes) {
    const i32 pair = d.order[i];
    const u8* src = d.x + u64(pair / d.top_k) * row_bytes;
    if (d.weights == nullptr) {
      group_copy_row<Unroll>(dst, src, row_bytes, lane, kWarpSize);
    } else {
      const float w = d.weights[pair];
      group_copy_row<Unroll>(dst, src, row_bytes, lane, kWarpSize, [w](u32, vec16& v) { v = scale_bf16x8(v, w); });
    }
  }
}

// One thread, after an item's rows are all written (and seen by this thread): count the item; the
// run's last releases its arrival flag at the owner (system scope: it may be a peer's), covering
// every item's copy (each counter fences first).
KOSMOS_DEVICE void run_item_done(const DispatchParams& d, const DispatchItem& it) {
  fence_acq_rel_sys();
  if (atomic_add_acq_rel_dev(&d.run_done[i64(call_epoch() & 1) * d.experts + it.g], 1ull) + 1 == u64(chunks_of_run(d, it.g)))
    st_release_sys(arrived_flag(d, it.o, it.g - it.o * d.e_loc, d.rank), call_epoch());
}

// The dispatch's CTAs that move (standalone: all of them; fused: the movers): the plan, then items
// until the queue is dry. Returns dispatch_plan's verdict. smem_bytes: the kernel's dynamic shared
// memory; what the tables leave of it stages the rows (bulk_rows.h; 0: register copies). publish:
// dispatch_plan's.
template <int Unroll = kMoverUnroll>
KOSMOS_DEVICE bool dispatch_push(const DispatchParams& d, u32 smem_bytes = 0, bool publish = true) {
  extern __shared__ __align__(16) u8 dispatch_smem[];
  if (!dispatch_plan(d, publish)) return false;
  const i32* my_base = reinterpret_cast<const i32*>(dispatch_smem) + d.world * d.experts;
  const i32* chunk_start = my_base + d.experts;
  FusedHeads* heads = &flags_of(d.peer_bases, d.rank, d.flags_off)->fused[call_epoch() & 1];
  const Stage stage = stage_after(dispatch_smem, dispatch_smem_bytes(d.world, d.experts), smem_bytes);
  const i32 n_items = chunk_start[d.experts];
  for (;;) {  // 3. push
    const i64 item = claim_item(heads);
    if (item >= n_items) return true;
    const DispatchItem it = dispatch_item(d, my_base, chunk_start, item);
    cta_copy_item<Unroll>(d, it, stage);
    __syncthreads();
    if (threadIdx.x == 0) run_item_done(d, it);
  }
}

// The dispatch's pushes beside the builder call (gemm::run_builder_jobs_beside): each warp it runs
// on (the producer warpgroup's idle warps on Hopper; before the jobs elsewhere) claims items from
// the call's queue, the one the mover CTAs claim from, and copies them with its lanes, kUnroll
// vectors in flight a lane (as many as Hopper's producer warps hold: gemm::kProducerRegs). Items
// are a warp's grain: the host sizes item_rows for it (kosmos/moe/dispatch.py SIDE_ITEM_BYTES). It
// reads the item tables CTA 0 plans (d.item_tables, at d.tables_ready). `on` false: nothing (the portable
// builder runs side work before its jobs, so there mover CTAs push and builders build at once:
// kosmos/moe/forward.py side_pushes).
struct SideDispatch {
  static constexpr int kUnroll = 8;
  const DispatchParams& d;
  bool on;
  KOSMOS_DEVICE void operator()(int t) const {
    if (!on) return;
    const u32 lane = u32(t) % kWarpSize;
    u64 ok = 1;
    if (lane == 0) ok = wait_flag_dev(d.wait, SITE_GRID, d.tables_ready, call_epoch()) ? 1 : 0;
    if (warp_broadcast(ok) == 0) return;  // the builders' waits for the runs give up too
    warp_sync();                          // every lane's loads of the tables after lane 0's acquire
    const i32* my_base = d.item_tables;
    const i32* chunk_start = my_base + d.experts;
    const i32 n_items = chunk_start[d.experts];
    FusedHeads* heads = &flags_of(d.peer_bases, d.rank, d.flags_off)->fused[call_epoch() & 1];
    for (;;) {
      u64 item = 0;
      if (lane == 0) item = atomic_add_relaxed_dev(&heads->mover, 1ull);
      item = warp_broadcast(item);
      if (item >= u64(n_items)) break;
      const DispatchItem it = dispatch_item(d, my_base, chunk_start, i64(item));
      warp_copy_item<kUnroll>(d, it, lane);
      warp_sync();
      if (lane == 0) run_item_done(d, it);
      warp_sync();
    }
    phase_mark(11, threadIdx.x - lane);  // every warp's lane 0: the slot keeps the last to finish
  }
};

// The standalone dispatch: every CTA pushes; then (4.) the owner leaves only with every non-empty
// run aimed at it in place, so the next launch on its stream reads a complete arena.
KOSMOS_DEVICE void dispatch(const DispatchParams& d) {
  if (!dispatch_push(d)) return;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    extern __shared__ __align__(16) u8 dispatch_smem[];
    const i32* counts = reinterpret_cast<const i32*>(dispatch_smem);
    int ok = 1;
    for (i32 l = 0; l < d.e_loc && ok; ++l)
      for (int s = 0; s < d.world && ok; ++s)
        if (counts[s * d.experts + d.rank * d.e_loc + l] > 0)
          ok = wait_flag_sys(d.wait, SITE_PEER_ARRIVED, arrived_flag(d, d.rank, l, s), call_epoch());
  }
}

}  // namespace moe
}  // namespace kosmos
