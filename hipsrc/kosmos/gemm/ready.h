// Readiness hooks: what a builder tile waits for before its first K-slab is loaded. The builder
// calls its hook once per unit (the producer, before the unit's first load, kb = tile.kb0) and fences the async
// proxy after a non-trivial hook, so the TMA loads see what the wait acquired. A hook returning
// false (a bounded wait gave up) stops the builder; the grid drains and the host names the site.
#pragma once
#include "../mover.h"
#include "../wait.h"
#include "schedule.h"

namespace kosmos {
namespace gemm {

// Dense: tile row tm may start once row_flags[tm] >= target (device scope).
struct RowFlagsReady {
  const u64* flags;
  u64 target;
  WaitCtx w;
  static constexpr bool kTrivial = false;
  KOSMOS_DEVICE bool operator()(const TileCoord& t, i32 /*kb*/) const {
    return wait_flag_dev(w, SITE_TILE_READY, flags + t.tm, target);
  }
};

// Grouped: group e's rows are `runs` consecutive runs (in a MoE receive arena: one run per source
// rank) of run_rows[e * rows_group + s * rows_run] rows, and whoever fills run (e, s) releases
// arrived[e * flags_group + s] >= target at system scope (it may be a peer GPU) once all its rows
// are in place. (Strides: the MoE dispatch's counts table is source-major, [source][expert].) A
// tile waits for exactly the non-empty runs its rows overlap: TN/NN, the tile's rows of the group;
// NT (the reduction runs over the group's rows), all of them. Contract (the caller's): the runs of
// group e sum to its row count; rows past them would be read unwaited.
template <int L>
struct RunsArrived {
  const i32* run_rows;
  i64 rows_group, rows_run;
  const u64* arrived;
  i64 flags_group;
  u64 target;
  i32 runs;
  WaitCtx w;
  static constexpr bool kTrivial = false;
  KOSMOS_DEVICE bool operator()(const TileCoord& t, i32 /*kb*/) const {
    i32 lo = 0, hi = t.k_end - t.k_off;  // NT: the whole group
    if (L != LAYOUT_NT) {                // TN/NN: rows [row0, row0 + kTileM) of the group, clipped
      lo = t.tm * kTileM;
      hi = min(lo + kTileM, lo + (t.row_end - t.row0));
    }
    const i32* rows = run_rows + t.group * rows_group;
    const u64* flags = arrived + t.group * flags_group;
    i32 start = 0;
    for (i32 s = 0; s < runs && start < hi; ++s) {
      // (relaxed system-scope loads: the counts may be a peer's, written during this kernel)
      const i32 end = start + i32(ld_relaxed_sys_u32(reinterpret_cast<const u32*>(rows + s * rows_run)));
      if (end > start && end > lo && !wait_flag_sys(w, SITE_TILE_READY, flags + s, target)) return false;
      start = end;
    }
    return true;
  }
};

// A GEMM on another job's whole output in one kernel (the MoE forward's shared MLP: its second
// GEMM on the first's h, queued after the routed experts' jobs, so the wait is a formality): a
// unit may start once *count (EpiCountDone's) reaches target. reached(): the same for any caller.
struct CountReached {
  const u64* count;
  u64 target;
  WaitCtx w;
  static constexpr bool kTrivial = false;
  KOSMOS_DEVICE bool reached() const { return wait_flag_dev(w, SITE_TILE_READY, count, target); }
  KOSMOS_DEVICE bool operator()(const TileCoord&, i32 /*kb*/) const { return reached(); }
};

// Two hooks, both (the MoE backward's shared dgrad1: SA's output read, the router's dx stored under
// its sums first).
template <class A, class B>
struct BothReady {
  A a;  // (by value: small hooks, kept in registers)
  B b;
  static constexpr bool kTrivial = false;
  KOSMOS_DEVICE bool operator()(const TileCoord& t, i32 kb) const { return a(t, kb) && b(t, kb); }
};

// Grouped, a second GEMM on the first's output in one kernel (the MoE forward's GEMM2 on GEMM1's h):
// tile (group, tm) may start once the first GEMM has finished all `target` of its tiles in that
// tile row (EpiTileRowDone's counters, same groups: tile rows are the same for both GEMMs).
struct TileRowsDone {
  const u64* rows_done;
  const GroupTable* table;
  u64 target;
  WaitCtx w;
  static constexpr bool kTrivial = false;
  KOSMOS_DEVICE bool operator()(const TileCoord& t, i32 /*kb*/) const {
    return wait_flag_dev(w, SITE_TILE_READY, rows_done + table->tile_start[t.group] + t.tm, target);
  }
};

// Grouped, a ragged NT job (a wgrad, reducing over all of a group's rows) on another job's output
// in one kernel (the MoE backward's wgrad1 on dgrad2's d_pre): unit (group g) waits until every
// tile row of g has all `target` of that job's tiles (EpiTileRowDone's counters).
struct GroupTilesDone {
  const u64* rows_done;
  const GroupTable* table;
  u64 target;
  WaitCtx w;
  static constexpr bool kTrivial = false;
  KOSMOS_DEVICE bool operator()(const TileCoord& t, i32 /*kb*/) const {
    for (i32 tr = table->tile_start[t.group]; tr < table->tile_start[t.group + 1]; ++tr)
      if (!wait_flag_dev(w, SITE_TILE_READY, rows_done + tr, target)) return false;
    return true;
  }
};

// For movers of a grouped GEMM's output (the MoE combine's items): rows [row, row + rows) of
// group l are final once every tile row under them has `target` finished tiles (EpiTileRowDone's
// counters over `table`). All threads call it, thread 0 waits; false on every thread: a wait gave up.
struct GroupRowsDone {
  const u64* rows_done;
  const GroupTable* table;
  u64 target;
  const WaitCtx& w;
  KOSMOS_DEVICE bool operator()(i32 l, i32 row, i32 rows) const {
    __shared__ int s_ok;
    int ok = 1;
    if (threadIdx.x == 0) {
      const i32 off = row - table->row_start[l], base = table->tile_start[l];
      for (i32 tr = off / kTileM; tr <= (off + rows - 1) / kTileM && ok; ++tr)
        ok = wait_flag_dev(w, SITE_TILE_READY, &rows_done[base + tr], target);
    }
    return cta_broadcast(&s_ok, ok) != 0;
  }
};

}  // namespace gemm
}  // namespace kosmos
