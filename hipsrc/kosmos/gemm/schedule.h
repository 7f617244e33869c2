// Where each work unit of a builder queue lies: the schedules (dense raster, ragged groups) and
// the TileCoord they produce, which is all a matrix-instruction layer needs to place a tile.
//
// A schedule is a small struct with
//   typedef TileConfig<BN> Tile          the tile configuration (config.h)
//   static constexpr bool kGroupedB   B is one matrix per group (a 3-D TMA map [groups, rows, cols])
//   static constexpr bool kRaggedK    the reduction of a unit may end inside a 64-deep slab
//   static constexpr bool kMaskedRows a tile's rows may end inside the output (TileCoord::masked)
//   static constexpr bool kStreamK    some units are K-ranges of a tile (StreamKSchedule)
//   const Problem& p                   the dimensions (of one group, for grouped schedules)
//   TileCoord tile(i32 u) const        queue position -> tile
#pragma once
#include "../calls.h"
#include "../wait.h"
#include "config.h"

namespace kosmos {
namespace gemm {

// A claimed work unit: an output tile, or one K-range of it under split-K.
struct TileCoord {
  i32 index;      // position in the queue order
  i32 tm, tn;     // tile row (within its group) and tile column
  i32 split;      // which K-range (0 without split-K)
  i32 kb0, kb1;   // its reduction slabs [kb0, kb1); kb1 == kb0: nothing to reduce (the tile is zero)
  i32 group;      // B's group (its third TMA coordinate); 0 without groups
  i32 a_m0;       // A's M index of the tile's first row (output row for TN/NN, column of a for NT)
  i32 a_mlim;     // A's M indices at or past this read as zero (portable layers)
  i32 k_off;      // reduction index of slab 0 (rows of the packed operands for a grouped NT), else 0
  i32 k_end;      // reduction indices at or past this contribute nothing
  i32 row0;       // output row of the tile's first row
  i32 row_end;    // output rows at or past this are not the tile's (not stored)
  i32 masked;     // 1: row_end lies inside the output tensor, so rows are stored one by one (no TMA box)
  i32 col0;       // output column of the tile's first column (SwiGLU: of its first gate/up pair)
  i32 half;       // columns from the tile's lower half to its upper half (BN / 2)
  // StreamKSchedule only: a K-range of a tail tile (sk_pieces > 1 ranges), its index in K order
  // (the last finishes the tile) and the tail tile it belongs to.
  i32 sk_tile, sk_rank, sk_pieces;
};

// The output columns of tile column tn: BN wide, or BN / 2 under SwiGLU (gate and up halves).
template <int BN>
KOSMOS_DEVICE void place_columns(const Problem& p, i32 tn, TileCoord& c) {
  c.col0 = p.swiglu_f ? tn * (BN / 2) : tn * BN;
  c.half = BN / 2;
}

// Tile t of a tiles_m x tiles_n grid in grouped raster: kRasterGroupM tile-rows share each
// B column block (L2 reuse), column by column within a group of rows.
KOSMOS_DEVICE void raster(i32 t, i32 tiles_m, i32 tiles_n, i32& tm, i32& tn) {
  const i32 per_group = kRasterGroupM * tiles_n;
  const i32 g = t / per_group;
  const i32 first_m = g * kRasterGroupM;
  const i32 rows = (tiles_m - first_m) < kRasterGroupM ? (tiles_m - first_m) : kRasterGroupM;
  const i32 r = t - g * per_group;
  tm = first_m + r % rows;
  tn = r / rows;
}

// One GEMM. Consecutive queue positions are the K-splits of one tile (without split-K the
// position is the tile index of the raster).
template <class Cfg = DefaultTile>
struct DenseSchedule {
  typedef Cfg Tile;
  static constexpr bool kGroupedB = false;
  static constexpr bool kRaggedK = false;
  static constexpr bool kMaskedRows = false;
  static constexpr bool kStreamK = false;
  const Problem& p;  // a reference: kernel parameters stay in the constant bank, not in registers
  KOSMOS_DEVICE TileCoord tile(i32 u) const {
    const i32 splits = k_splits_of(p);
    const i32 t = u / splits;
    return place(p, u, t, u - t * splits, splits);
  }
  // Raster tile t of the grid, queue position u, K-range r of `ranges` equal ones (ceil(k_slabs /
  // ranges) slabs each, the last shorter; the host keeps every range non-empty).
  KOSMOS_DEVICE static TileCoord place(const Problem& p, i32 u, i32 t, i32 r, i32 ranges) {
    const i32 per = (p.k_slabs + ranges - 1) / ranges;
    TileCoord c;
    c.index = u;
    raster(t, p.tiles_m, p.tiles_n, c.tm, c.tn);
    c.split = r;
    c.kb0 = r * per;
    c.kb1 = min(r * per + per, p.k_slabs);
    c.group = 0;
    c.a_m0 = c.row0 = c.tm * kTileM;
    c.a_mlim = c.row_end = p.mo;
    c.k_off = 0;
    c.k_end = p.kr;
    c.masked = 0;
    place_columns<Cfg::kTileN>(p, c.tn, c);
    return c;
  }
};

// ---- stream-K (the standalone GEMM): the last tiles cut into K-ranges, fixed up in the kernel ----
// The raster's first `full` tiles are whole units. Each of the `tail` tiles after them is cut into
// `ranges` K-ranges of ceil(k_slabs / ranges) slabs, queued range-major (every tail tile's range
// 0, then every range 1, ...), so CTAs working at the same time read the same K slabs of the operands (L2
// reuse, as whole tiles do; a first version dealt each CTA a contiguous run of slabs, staggering
// K across the grid, and measured slower than whole tiles: notes/gemm.md). A range other than a
// tile's last stores its fp32 partial; the last range's unit (queued after the others, which never
// wait: no cycle) waits for them, adds them to its own in a fixed order (bitwise reproducible) and
// stores the tile (builder_wgmma.h stream_k_fixup).
struct StreamK {
  float* ws;      // [tail][ranges - 1][kAcc * 256] fp32: partials in accumulator-fragment order
  u64* arrived;   // [tail]: partials stored so far in this launch (the last range resets its tile's)
  i32 full;       // raster tiles [0, full) are whole units
  i32 tail;       // raster tiles [full, full + tail) are cut into K-ranges
  i32 ranges;     // K-ranges per tail tile (>= 2; DenseSchedule::place cuts them)
};

template <class Cfg = DefaultTile>
struct StreamKSchedule {
  typedef Cfg Tile;
  static constexpr bool kGroupedB = false;
  static constexpr bool kRaggedK = false;
  static constexpr bool kMaskedRows = false;
  static constexpr bool kStreamK = true;
  const Problem& p;
  const StreamK& sk;
  const WaitCtx& wait;  // the last range's bounded wait for the others
  KOSMOS_DEVICE i32 units() const { return sk.full + sk.tail * sk.ranges; }
  KOSMOS_DEVICE TileCoord tile(i32 u) const {
    if (u < sk.full) {
      TileCoord c = DenseSchedule<Cfg>::place(p, u, u, 0, 1);
      c.sk_tile = -1;
      c.sk_rank = 0;
      c.sk_pieces = 1;
      return c;
    }
    const i32 r = (u - sk.full) / sk.tail, j = (u - sk.full) - r * sk.tail;
    TileCoord c = DenseSchedule<Cfg>::place(p, u, sk.full + j, r, sk.ranges);
    c.split = 0;  // (a split-K unit's split picks its partial's rows; a stream-K range has none)
    c.sk_tile = j;
    c.sk_rank = r;
    c.sk_pieces = sk.ranges;
    return c;
  }
};

// ---- ragged groups (the MoE expert GEMMs) ----
// Group e owns rows [row_start[e], row_start[e+1]) of the packed operand(s); the counts come
// from device memory, so the table is built on the device by every CTA at kernel start.
constexpr int kMaxGroups = 256;
static_assert(kMaxGroups <= kThreads, "build_group_table gives every group its own thread");

struct GroupTable {
  i32 row_start[kMaxGroups + 1];   // prefix of the group row counts
  u16 tile_start[kMaxGroups + 1];  // prefix of the groups' tile rows (TN/NN; ceil(rows / kTileM) each)
  i32 groups;
  i32 bad;                         // 0, or 1 + the first group whose count is negative, or -1: rows overflow
};

// All threads of the CTA: fill `g` from count(0) ... count(groups - 1) (Hillis-Steele scan,
// blockDim >= groups; `count` is a functor, e.g. a sum over a MoE counts table, or an array).
// rows_cap: rows of the packed operands. Returns false (g->bad set) on a negative count or a sum
// past rows_cap (or one count alone past it: the i32 prefix cannot wrap); the host checks that
// rows_cap / kTileM + groups fits tile_start's u16 and that rows_cap < 2^23.
template <class Count>
KOSMOS_DEVICE bool build_group_table(GroupTable* g, const Count& count, i32 groups, i32 rows_cap) {
  const i32 e = i32(threadIdx.x);
  i32 n = 0;
  if (e == 0) {
    g->groups = groups;
    g->bad = 0;
    g->row_start[0] = 0;
    g->tile_start[0] = 0;
  }
  __syncthreads();
  if (e < groups) {
    n = count(e);
    if (n < 0) {
      g->bad = 1 + e;  // racing offenders: one of them wins, the host names it
      n = 0;
    } else if (n > rows_cap) {
      g->bad = -1;  // checked per count, so the i32 prefix below cannot wrap (256 * 2^23 < 2^31)
      n = 0;
    }
    g->row_start[e + 1] = n;
    g->tile_start[e + 1] = u16((n + kTileM - 1) / kTileM);
  }
  for (i32 off = 1; off < groups; off <<= 1) {
    __syncthreads();
    i32 r = 0, t = 0;
    if (e < groups && e >= off) {
      r = g->row_start[e + 1 - off];
      t = g->tile_start[e + 1 - off];
    }
    __syncthreads();
    if (e < groups && e >= off) {
      g->row_start[e + 1] += r;
      g->tile_start[e + 1] = u16(g->tile_start[e + 1] + t);
    }
  }
  __syncthreads();
  if (e == 0 && g->bad == 0 && g->row_start[groups] > rows_cap) g->bad = -1;
  __syncthreads();
  return g->bad == 0;
}

KOSMOS_DEVICE bool build_group_table(GroupTable* g, const i32* counts, i32 groups, i32 rows_cap) {
  return build_group_table(g, [=](i32 e) { return counts[e]; }, groups, rows_cap);
}

// Every persistent GEMM's tile queue: words[0] is its head, counted from 0 in each launch (queue_exit
// resets it), so a launch needs no host-side state: a CUDA graph can replay it.
struct QueueClaim {
  u64* head;
  i32 units;
  KOSMOS_DEVICE i32 operator()() const {
    const u64 v = atomic_add_relaxed_dev(head, 1ull);
    return v < u64(units) ? i32(v) : -1;
  }
};

// QueueClaim whose first unit is the CTA's own (blockIdx.x), taken without the atomic's round trip
// to L2 before the kernel's first loads; the rest come from the queue, past the grid's first
// units. Only where every CTA builds from its start and no unit waits on another (the standalone
// plain and grouped GEMMs): a fused kernel's movers would leave their first units undone.
struct GridFirstClaim {
  u64* head;
  i32 units;
  bool first = true;
  KOSMOS_DEVICE i32 operator()() {
    if (first) {
      first = false;
      return i32(blockIdx.x) < units ? i32(blockIdx.x) : -1;
    }
    const u64 v = atomic_add_relaxed_dev(head, 1ull) + gridDim.x;
    return v < u64(units) ? i32(v) : -1;
  }
};

// All threads, last thing in the kernel: count this CTA out in words[1]; the last one resets the
// queue (words[0], words[1]) for the next launch (only the device knows how many tiles a grouped
// launch had; and a replayed graph's launches must not depend on the host).
KOSMOS_DEVICE void queue_exit(u64* words) {
  if (last_cta_out(&words[1])) words[0] = 0;
}

// The group that queue position q (in units of `per_row` tiles per tile row) falls in: the last
// e with tile_start[e] * per_row <= q (empty groups have no tile rows and are skipped).
KOSMOS_DEVICE i32 group_of(const GroupTable& g, i32 q, i32 per_row) {
  i32 lo = 0, hi = g.groups - 1;
  while (lo < hi) {
    const i32 mid = (lo + hi + 1) / 2;
    if (i32(g.tile_start[mid]) * per_row <= q) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Grouped forward (TN) and dgrad (NN): rows of every group packed in a [rows_cap, kr] (and the
// output [rows_cap, no]); B is [groups][...] (3-D map). A tile never spans two groups: its rows
// past the group's end are computed from the next group's rows and not stored.
// Grouped wgrad (NT): dW[e] = dY_e^T X_e, out [groups * mo, no]; the reduction runs over the
// group's rows, so its last slab is ragged (kRaggedK: the layer zeroes the rows past k_end).
template <int L, class Cfg = DefaultTile>
struct GroupedSchedule {
  typedef Cfg Tile;
  static constexpr bool kGroupedB = (L != LAYOUT_NT);
  static constexpr bool kRaggedK = (L == LAYOUT_NT);
  static constexpr bool kMaskedRows = true;
  static constexpr bool kStreamK = false;
  const Problem& p;  // a reference: kernel parameters stay in the constant bank, not in registers
  const GroupTable* g;
  KOSMOS_DEVICE i32 units() const {
    if (L == LAYOUT_NT) return g->groups * p.tiles_m * p.tiles_n;
    return i32(g->tile_start[g->groups]) * p.tiles_n;
  }
  KOSMOS_DEVICE TileCoord tile(i32 u) const {
    TileCoord c;
    c.index = u;
    c.split = 0;
    c.kb0 = 0;
    if (L == LAYOUT_NT) {
      const i32 per = p.tiles_m * p.tiles_n;
      const i32 e = u / per;
      raster(u - e * per, p.tiles_m, p.tiles_n, c.tm, c.tn);
      c.group = e;
      c.k_off = g->row_start[e];
      c.k_end = g->row_start[e + 1];
      c.kb1 = (c.k_end - c.k_off + kTileK - 1) / kTileK;
      c.a_m0 = c.tm * kTileM;
      c.a_mlim = p.mo;
      c.row0 = e * p.mo + c.a_m0;
      c.row_end = (e + 1) * p.mo;
    } else {
      const i32 e = group_of(*g, u, p.tiles_n);
      const i32 first = i32(g->tile_start[e]);
      raster(u - first * p.tiles_n, i32(g->tile_start[e + 1]) - first, p.tiles_n, c.tm, c.tn);
      c.group = e;
      c.kb1 = p.k_slabs;
      c.k_off = 0;
      c.k_end = p.kr;
      c.a_m0 = c.row0 = g->row_start[e] + c.tm * kTileM;
      c.a_mlim = c.row_end = g->row_start[e + 1];
    }
    c.masked = c.row0 + kTileM > c.row_end ? 1 : 0;
    place_columns<Cfg::kTileN>(p, c.tn, c);
    return c;
  }
};

// The readiness hook that never waits (the standalone GEMM).
struct AlwaysReady {
  static constexpr bool kTrivial = true;
  KOSMOS_DEVICE bool operator()(const TileCoord&, i32 /*k_slab*/) const { return true; }
};

}  // namespace gemm
}  // namespace kosmos
