// GEMM epilogues, chosen at compile time (a template parameter of the builder).
//
// Every matrix-instruction layer arranges its accumulator fragment so that each thread holds,
// for an output row, a pair of adjacent columns (lc, lc+1) in the tile's lower half together
// with the same pair tile.half (BN / 2) columns further (the upper half). The layer calls
//   epi.pair(tile, row, lc, lo0, lo1, hi0, hi1)
// for each such pair (row: global output row, may be >= tile.row_end in a row tail (not stored); lc: even, 0..BN/2-2; the upper half is tile.half columns further),
// then, once every thread of the tile has stored, one thread calls epi.done(tile) when
// Epi::kHasDone is true: the tile's single completion point (fused kernels release a flag there).
// An epilogue with kQuadStores also offers quad(tile, row, lc, q, lo[2][8], hi[2][8]): four n8 blocks of rows row and
// row + 8 at once (the Hopper layer's fragment: lane q of a quad holds columns lc + 8b + {0, 1},
// lc = 8J + 2q, lo[i][2b + e]), moved through quad_transpose as 16-byte runs.
// Adding an epilogue (e.g. MXFP8 quantization) = adding a struct with this interface.
#pragma once
#include "../platform.h"
#include "schedule.h"

namespace kosmos {
namespace gemm {

// A 4 x 4 transpose across the lanes of a quad (q = lane % 4): lane q's v[b] becomes lane b's v[q]
// (before: one bf16 pair of each of four n8 blocks; after: block q's four pairs, its 8 columns in
// order). Two xor butterflies, four shuffles; the whole warp must take part.
KOSMOS_DEVICE void quad_transpose(u32 (&v)[4], i32 q) {
  const bool q1 = (q & 2) != 0, q0 = (q & 1) != 0;
  u32 r0 = shfl_xor_u32(q1 ? v[0] : v[2], 2), r1 = shfl_xor_u32(q1 ? v[1] : v[3], 2);
  if (q1) { v[0] = r0; v[1] = r1; } else { v[2] = r0; v[3] = r1; }
  r0 = shfl_xor_u32(q0 ? v[0] : v[1], 1);
  r1 = shfl_xor_u32(q0 ? v[2] : v[3], 1);
  if (q0) { v[0] = r0; v[2] = r1; } else { v[1] = r0; v[3] = r1; }
}

// One lane's run of a row after quad_transpose: 8 bf16 (4 words) or 8 fp32 (8 words) at `p`, as
// 16-byte stores. Whole runs only: every output's columns and row stride are multiples of 64 and
// its base 16-byte aligned (checked on the host: gemm_shape, MoEConfig, check_array), so a run
// starting inside the row ends inside it.
template <int W>
KOSMOS_DEVICE void store_run(void* p, const u32 (&v)[W]) {
#pragma unroll
  for (int k = 0; k < W / 4; ++k) {
    st16(reinterpret_cast<u8*>(p) + 16 * k, vec16{v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]});
  }
}

// out[mo, no] bf16, row stride ldo elements.
struct EpiStoreBf16 {
  u16* out;
  i32 ldo, mo, no;
  static constexpr int kElemBytes = 2;
  static constexpr bool kHasDone = false;
  static constexpr bool kQuadStores = false;  // quad() below: EpiQuad turns it on
  static constexpr bool kTmaStore = false;
  static constexpr bool kReduceAdd = false;  // (EpiTma: a plain TMA store)
  KOSMOS_DEVICE void pair(const TileCoord& t, i32 row, i32 lc, float lo0, float lo1, float hi0,
                          float hi1) const {
    if (row >= t.row_end) return;
    const i32 col = t.col0 + lc;
    u16* p = out + i64(row) * ldo + col;
    if (col < no) *reinterpret_cast<u32*>(p) = pack_bf16x2(lo0, lo1);
    if (col + t.half < no) *reinterpret_cast<u32*>(p + t.half) = pack_bf16x2(hi0, hi1);
  }
  // The Hopper layer's register path (tiles whose rows end inside the output: with routed counts
  // every group's last row tile) four blocks at once, as EpiSwiGLU::quad: 16-byte runs. Only
  // where EpiQuad asks for it: in the TP and MXFP8 kernels its registers cost spills (session 27).
  KOSMOS_DEVICE void quad(const TileCoord& t, i32 row0, i32 lc, i32 q, const float (&lo)[2][8],
                          const float (&hi)[2][8]) const {
    const i32 col = t.col0 + lc - 2 * q + 8 * q;  // lane q stores the batch's block q (+ t.half)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        u32 v[4];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          v[b] = h ? pack_bf16x2(hi[i][2 * b], hi[i][2 * b + 1]) : pack_bf16x2(lo[i][2 * b], lo[i][2 * b + 1]);
        }
        quad_transpose(v, q);
        const i32 row = row0 + 8 * i, c = col + h * t.half;
        if (row < t.row_end && c < no) store_run(out + i64(row) * ldo + c, v);
      }
    }
  }
  KOSMOS_DEVICE void done(const TileCoord&) const {}
};

// out[mo, no] fp32 (a partial-sum staging buffer, or a full-precision result), row stride ldo.
// Under split-K, unit `split` writes the partial out[split][mo][ldo].
struct EpiStoreF32 {
  float* out;
  i32 ldo, mo, no;
  static constexpr int kElemBytes = 4;
  static constexpr bool kHasDone = false;
  static constexpr bool kQuadStores = false;  // quad() below: EpiQuad turns it on
  static constexpr bool kTmaStore = false;
  static constexpr bool kReduceAdd = false;
  KOSMOS_DEVICE void pair(const TileCoord& t, i32 row, i32 lc, float lo0, float lo1, float hi0,
                          float hi1) const {
    if (row >= t.row_end) return;
    const i32 col = t.col0 + lc;
    float* p = out + (i64(t.split) * mo + row) * ldo + col;
    if (col < no) { p[0] = lo0; p[1] = lo1; }
    if (col + t.half < no) { p[t.half] = hi0; p[t.half + 1] = hi1; }
  }
  // As EpiStoreBf16::quad, a block's 8 floats a lane (two 16-byte runs): the even and the odd
  // columns are transposed as two words.
  KOSMOS_DEVICE void quad(const TileCoord& t, i32 row0, i32 lc, i32 q, const float (&lo)[2][8],
                          const float (&hi)[2][8]) const {
    const i32 col = t.col0 + lc - 2 * q + 8 * q;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        u32 ev[4], od[4];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          ev[b] = __float_as_uint(h ? hi[i][2 * b] : lo[i][2 * b]);
          od[b] = __float_as_uint(h ? hi[i][2 * b + 1] : lo[i][2 * b + 1]);
        }
        quad_transpose(ev, q);
        quad_transpose(od, q);
        const u32 v[8] = {ev[0], od[0], ev[1], od[1], ev[2], od[2], ev[3], od[3]};
        const i32 row = row0 + 8 * i, c = col + h * t.half;
        if (row < t.row_end && c < no) store_run(out + (i64(t.split) * mo + row) * ldo + c, v);
      }
    }
  }
  KOSMOS_DEVICE void done(const TileCoord&) const {}
};

// out[mo, no] fp32 += the tile: C += A B in place (a gradient accumulated into fp32 main grads, a
// residual added), EpiStoreF32's record. Each output element is added to once per GEMM (whole
// tiles, no split-K), so out = out + (A B) with one fp32 round-to-nearest add per element; on
// Hopper (EpiTma) the TMA unit adds the staged tile in L2 (cp.reduce.async.bulk .add), no load.
struct EpiAccumulateF32 : EpiStoreF32 {
  static constexpr bool kReduceAdd = true;
  static constexpr bool kQuadStores = false;  // never through EpiStoreF32::quad, which stores
  KOSMOS_DEVICE explicit EpiAccumulateF32(const EpiStoreF32& e) : EpiStoreF32(e) {}
  KOSMOS_DEVICE void pair(const TileCoord& t, i32 row, i32 lc, float lo0, float lo1, float hi0,
                          float hi1) const {
    if (row >= t.row_end) return;
    const i32 col = t.col0 + lc;
    float* p = out + i64(row) * ldo + col;
    if (col < no) { p[0] += lo0; p[1] += lo1; }
    if (col + t.half < no) { p[t.half] += hi0; p[t.half + 1] += hi1; }
  }
};

// A store epilogue through shared memory and TMA stores on the Hopper layer (full 128-byte lines,
// and the consumers move on to the next tile while the stores drain). `map` describes `out` (boxes
// of 64 rows x 128 bytes: 64 bf16 or 32 fp32 columns, 128-byte swizzle); other layers ignore it and
// use pair(). tma_row: the map row of the tile's first row. Split-K partials (fp32): the map covers
// [splits * mo, no], so the host pads mo to whole tiles (a tile's rows past the output land in its
// own split's padding, not in the next split's rows); without split-K, split is 0. A Store with
// kReduceAdd (EpiAccumulateF32) adds the box into the output instead (a TMA reduction).
template <class Store>
struct EpiTma : Store {
  const TensorMap* map;
  static constexpr bool kTmaStore = true;
  static constexpr bool kTransposed = false;
  static constexpr int kTmaElemBytes = Store::kElemBytes;
  KOSMOS_DEVICE EpiTma(const Store& e, const TensorMap* m) : Store(e), map(m) {}
  KOSMOS_DEVICE i32 tma_row(const TileCoord& t) const { return t.split * this->mo + t.row0; }
};
typedef EpiTma<EpiStoreBf16> EpiStoreBf16Tma;
typedef EpiTma<EpiStoreF32> EpiStoreF32Tma;

// The result stored transposed: the GEMM's (row, col) at out[col][row] (out [no, mo], row stride
// ldo; its TMA map that of out itself). kosmos.gemm's swapped MXFP8 TN computes (b a^T) and wants
// a b^T: this writes it without a transpose pass. The builder stages each 64 x 64 subtile
// transposed; pair() (the register path) stores element by element.
struct EpiStoreBf16TmaT : EpiStoreBf16Tma {
  static constexpr bool kTransposed = true;
  KOSMOS_DEVICE EpiStoreBf16TmaT(const EpiStoreBf16& e, const TensorMap* m) : EpiStoreBf16Tma(e, m) {}
  KOSMOS_DEVICE void pair(const TileCoord& t, i32 row, i32 lc, float lo0, float lo1, float hi0,
                          float hi1) const {
    if (row >= t.row_end) return;
    const i32 col = t.col0 + lc;
    const u32 lo = pack_bf16x2(lo0, lo1), hi = pack_bf16x2(hi0, hi1);
    u16* p = out + row;
    if (col < no) p[i64(col) * ldo] = u16(lo), p[i64(col + 1) * ldo] = u16(lo >> 16);
    if (col + t.half < no) p[i64(col + t.half) * ldo] = u16(hi), p[i64(col + t.half + 1) * ldo] = u16(hi >> 16);
  }
};

typedef EpiTma<EpiAccumulateF32> EpiAccumulateF32Tma;

// A store epilogue whose register path (the Hopper layer's) moves 16-byte runs (Store::quad):
// for the grouped kernels, where every group's last row tile takes that path.
template <class Store>
struct EpiQuad : Store {
  static_assert(!Store::kReduceAdd, "Store::quad stores: an adding epilogue (EpiAccumulateF32) must keep pair()");
  static constexpr bool kQuadStores = true;
  KOSMOS_DEVICE explicit EpiQuad(const Store& e) : Store(e) {}
};

// A store epilogue with its TMA map (the same store through TMA on the Hopper layer).
KOSMOS_DEVICE EpiStoreBf16Tma with_tma(const EpiStoreBf16& e, const TensorMap* m) { return EpiStoreBf16Tma(e, m); }
KOSMOS_DEVICE EpiStoreF32Tma with_tma(const EpiStoreF32& e, const TensorMap* m) { return EpiStoreF32Tma(e, m); }

// SwiGLU: the tile's lower half holds gate columns, its upper half the matching up columns
// (see b_chunk_col); out[mo, f] = silu(gate) * up in bf16, f output columns per row. With `pre`
// set, the pre-activations are kept for the backward: pre[row, c] = gate, pre[row, f + c] = up
// (bf16, row stride 2f), the values a plain TN GEMM of the same operands would store.
struct EpiSwiGLU {
  u16* out;
  i32 ldo, mo, f;
  u16* pre;  // nullptr: not kept
  static constexpr bool kHasDone = false;
  static constexpr bool kQuadStores = true;
  static constexpr bool kTmaStore = false;
  // rcp_approx, not g / x (IEEE division's slow path: notes/moe.md attempt 17) nor __frcp_rn (a
  // branch and a call per element: session 27)
  KOSMOS_DEVICE static float silu(float g) { return g * rcp_approx(1.0f + __expf(-g)); }
  // The math runs whether or not the pair is in the output, only the stores are guarded: no branch
  // between two pairs' math, so the compiler can interleave them (the epilogue is latency-bound).
  KOSMOS_DEVICE void pair(const TileCoord& t, i32 row, i32 lc, float g0, float g1, float u0,
                          float u1) const {
    const i32 col = t.col0 + lc;  // 256-wide tiles only: gate lc and up lc + 128
    const u32 h = pack_bf16x2(silu(g0) * u0, silu(g1) * u1);
    if (row >= t.row_end || col >= f) return;
    *reinterpret_cast<u32*>(out + i64(row) * ldo + col) = h;
    if (pre != nullptr) {
      u16* p = pre + i64(row) * (2 * f) + col;
      *reinterpret_cast<u32*>(p) = pack_bf16x2(g0, g1);
      *reinterpret_cast<u32*>(p + f) = pack_bf16x2(u0, u1);
    }
  }
  // The Hopper layer's four blocks at once (kQuadStores): each lane stores one block's 8 columns of
  // h (and of gate and up) as 16 bytes, so a quad writes 64 contiguous bytes of the row: whole
  // sectors and a quarter of the store instructions (u32 stores filled half of each sector a
  // request; with the kept pre that was most of the epilogue's time: notes/moe.md, session 27).
  // Needs 16-byte aligned rows (f, ldo multiples of 64: host-checked) and a converged warp.
  KOSMOS_DEVICE void quad(const TileCoord& t, i32 row0, i32 lc, i32 q, const float (&lo)[2][8],
                          const float (&hi)[2][8]) const {
    const i32 col = t.col0 + lc - 2 * q + 8 * q;  // lane q stores the batch's block q
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      u32 h[4], g[4], u[4];
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        h[b] = pack_bf16x2(silu(lo[i][2 * b]) * hi[i][2 * b], silu(lo[i][2 * b + 1]) * hi[i][2 * b + 1]);
        g[b] = pack_bf16x2(lo[i][2 * b], lo[i][2 * b + 1]);
        u[b] = pack_bf16x2(hi[i][2 * b], hi[i][2 * b + 1]);
      }
      quad_transpose(h, q);
      if (pre != nullptr) {
        quad_transpose(g, q);
        quad_transpose(u, q);
      }
      const i32 row = row0 + 8 * i;
      if (row >= t.row_end || col >= f) continue;
      st16(out + i64(row) * ldo + col, vec16{h[0], h[1], h[2], h[3]});
      if (pre != nullptr) {
        u16* p = pre + i64(row) * (2 * f) + col;
        st16(p, vec16{g[0], g[1], g[2], g[3]});
        st16(p + f, vec16{u[0], u[1], u[2], u[3]});
      }
    }
  }
  KOSMOS_DEVICE void done(const TileCoord&) const {}
};

// The SwiGLU backward as the epilogue of the GEMM that computes dA = dOut W2 (NN, [mo, f]): with
// a = silu(g) u, it reads the forward's kept pre[row] = [g, u] (EpiSwiGLU's, row stride 2f) and
// writes out[row] = [dg, du] (bf16, row stride ldo = 2f) from the fp32 accumulators of dA, so dA
// is never rounded or stored. The same record layout as EpiSwiGLU (out, ldo, mo, f, pre).
struct EpiSwiGLUBackward {
  u16* out;
  i32 ldo, mo, f;
  const u16* pre;
  static constexpr bool kHasDone = false;
  static constexpr bool kTmaStore = false;
  static constexpr bool kQuadStores = true;
  KOSMOS_DEVICE u32 pre_word(i32 row, i32 col) const {
    return *reinterpret_cast<const u32*>(pre + i64(row) * (2 * f) + col);
  }
  // (d gate, d up) of one bf16 pair of g and u (packed) from dA's two fp32 accumulators, packed.
  KOSMOS_DEVICE static void grads(u32 gs, u32 us, float da0, float da1, u32& dgs, u32& dus) {
    const float g[2] = {bf16_to_f32(u16(gs)), bf16_to_f32(u16(gs >> 16))};
    const float u[2] = {bf16_to_f32(u16(us)), bf16_to_f32(u16(us >> 16))};
    const float da[2] = {da0, da1};
    float dg[2], du[2];
    for (int e = 0; e < 2; ++e) {  // silu'(g) = s (1 + g (1 - s)), s = sigmoid(g)
      // rcp_approx, not 1 / x: IEEE division's slow-path call puts the accumulators on the stack
      // (ptxas then serializes the wgmma); as EpiSwiGLU, math unguarded, stores guarded
      const float s = rcp_approx(1.0f + __expf(-g[e]));
      dg[e] = da[e] * u[e] * s * (1.0f + g[e] * (1.0f - s));
      du[e] = da[e] * g[e] * s;
    }
    dgs = pack_bf16x2(dg[0], dg[1]);
    dus = pack_bf16x2(du[0], du[1]);
  }
  KOSMOS_DEVICE void two(bool in_rows, i32 row, i32 col, u32 gs, u32 us, float da0, float da1) const {
    u32 dgs, dus;
    grads(gs, us, da0, da1, dgs, dus);
    if (!in_rows || col >= f) return;
    u16* o = out + i64(row) * ldo + col;
    *reinterpret_cast<u32*>(o) = dgs;
    *reinterpret_cast<u32*>(o + f) = dus;
  }
  // The Hopper layer's four blocks of two rows (kQuadStores; see EpiSwiGLU::quad): every lane loads
  // its block's 8 columns of g and u in each half and row as 16-byte runs (whole sectors; all eight
  // loads before any math: one round trip), quad_transpose hands each lane its own pairs, and the
  // grads go back the same way.
  KOSMOS_DEVICE void quad(const TileCoord& t, i32 row0, i32 lc, i32 q, const float (&lo)[2][8],
                          const float (&hi)[2][8]) const {
    const i32 col = t.col0 + lc - 2 * q + 8 * q;  // lane q moves the batch's block q (+ t.half)
    vec16 gv[2][2], uv[2][2];  // [row i][half]
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const i32 row = row0 + 8 * i, c = col + h * t.half;
        gv[i][h] = uv[i][h] = vec16{0, 0, 0, 0};
        if (row < t.row_end && c < f) {
          const u16* p = pre + i64(row) * (2 * f) + c;
          gv[i][h] = ld16(p);
          uv[i][h] = ld16(p + f);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        u32 g[4] = {gv[i][h].x, gv[i][h].y, gv[i][h].z, gv[i][h].w};
        u32 u[4] = {uv[i][h].x, uv[i][h].y, uv[i][h].z, uv[i][h].w};
        quad_transpose(g, q);
        quad_transpose(u, q);
        u32 dg[4], du[4];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          grads(g[b], u[b], h ? hi[i][2 * b] : lo[i][2 * b], h ? hi[i][2 * b + 1] : lo[i][2 * b + 1], dg[b], du[b]);
        }
        quad_transpose(dg, q);
        quad_transpose(du, q);
        const i32 row = row0 + 8 * i, c = col + h * t.half;
        if (row >= t.row_end || c >= f) continue;
        u16* o = out + i64(row) * ldo + c;
        st16(o, vec16{dg[0], dg[1], dg[2], dg[3]});
        st16(o + f, vec16{du[0], du[1], du[2], du[3]});
      }
    }
  }
  // The other layers' pair at a time.
  KOSMOS_DEVICE void pair(const TileCoord& t, i32 row, i32 lc, float lo0, float lo1, float hi0,
                          float hi1) const {
    const bool in_rows = row < t.row_end;
    const i32 lo = t.col0 + lc, hi = lo + t.half;
    u32 g_lo = 0, u_lo = 0, g_hi = 0, u_hi = 0;
    if (in_rows && lo < f) {
      g_lo = pre_word(row, lo);
      u_lo = pre_word(row, lo + f);
    }
    if (in_rows && hi < f) {
      g_hi = pre_word(row, hi);
      u_hi = pre_word(row, hi + f);
    }
    two(in_rows, row, lo, g_lo, u_lo, lo0, lo1);
    two(in_rows, row, hi, g_hi, u_hi, hi0, hi1);
  }
  KOSMOS_DEVICE void done(const TileCoord&) const {}
};

// Adds a completion point to any epilogue: once per tile, after all of the tile's stores are done
// (TMA stores waited for), one thread counts the tile with a device-scope release. Fused kernels
// put their "tile ready" flag release here; the standalone gated kernel counts tiles with it.
template <class Base>
struct EpiCountDone : Base {
  u64* tiles_done;
  static constexpr bool kHasDone = true;
  KOSMOS_DEVICE EpiCountDone(const Base& b, u64* counter) : Base(b), tiles_done(counter) {}
  KOSMOS_DEVICE void done(const TileCoord&) const {
    fence_acq_rel_dev();
    atomic_add_acq_rel_dev(tiles_done, 1ull);
  }
};

// The same per tile row of a grouped GEMM: tile (group, tm) counts rows_done[tile_start[group] + tm],
// so a consumer of rows (a MoE mover) waits for its rows' tile rows to reach tiles_n.
template <class Base>
struct EpiTileRowDone : Base {
  u64* rows_done;
  const GroupTable* table;
  static constexpr bool kHasDone = true;
  KOSMOS_DEVICE EpiTileRowDone(const Base& b, u64* counters, const GroupTable* t)
      : Base(b), rows_done(counters), table(t) {}
  KOSMOS_DEVICE void done(const TileCoord& t) const {
    fence_acq_rel_dev();
    atomic_add_acq_rel_dev(&rows_done[table->tile_start[t.group] + t.tm], 1ull);
  }
};

}  // namespace gemm
}  // namespace kosmos
