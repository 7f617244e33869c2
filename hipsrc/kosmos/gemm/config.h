// GEMM builder geometry and problem description, shared by every matrix-instruction path.
//
// The numbers below are the source of truth; kosmos/gemm.py mirrors the ones the host needs
// (DEVICE_CONSTANTS: block size, tile, shared memory), checked at compile time by
// kosmos/runtime/mirror.py, so the host and fused kernels that put movers in the grid agree.
#pragma once
#include "arch.h"

namespace kosmos {
namespace gemm {

constexpr int kThreads = 384;     // one producer warpgroup + two consumer warpgroups (Hopper)
constexpr int kTileM = 128;       // output rows per tile
constexpr int kTileN = 256;       // output columns per tile (SwiGLU: 128 gate + 128 up columns)
constexpr int kTileK = 64;        // reduction depth per pipeline stage (one 128-byte bf16 row)
constexpr int kStages = 4;        // shared-memory pipeline depth
constexpr int kBoxBytes = 8192;   // one 64x64 bf16 box (the TMA unit, 128-byte swizzled)
constexpr int kStageBytesA = 16384;  // 2 boxes: 128 rows (or columns) of A
constexpr int kStageBytesB = 32768;  // 4 boxes: 256 columns of the output
constexpr int kStageBytes = 49152;
constexpr int kEpiBytes = 32768;     // bf16 store staging: 64 rows x 128 columns per consumer warpgroup
constexpr int kStreamKPartialBytes = kTileM * kTileN * 4;  // stream-K: a K-range's fp32 partial
// Dynamic shared memory of a builder CTA (and of every fused kernel, whose movers share the grid),
// per layer: Hopper's ring of stages + the epilogue staging + alignment + barriers; the portable
// layers' two slabs (sA[128][72], sB[256][72] bf16) + alignment, which also fits gfx942's 64 KiB
// of LDS (gfx950 has 160 KiB) with room for the kernels' static shared variables.
constexpr int kSmemBytesHopper = 230656;   // kStages * kStageBytes + kEpiBytes + 1024 + 256
constexpr int kSmemBytesPortable = 57344;  // 56 KiB >= (kTileM + kTileN) * (kTileK + 8) * 2 + 128
#if KOSMOS_GEMM_WGMMA
constexpr int kSmemBytes = kSmemBytesHopper;
#else
constexpr int kSmemBytes = kSmemBytesPortable;
#endif
constexpr int kGroupM = 8;           // tile raster: tile-rows per group (L2 reuse of B)
#ifdef KOSMOS_GEMM_GROUP_M           // a tuning knob for benchmarks (-DKOSMOS_GEMM_GROUP_M=16)
constexpr int kRasterGroupM = KOSMOS_GEMM_GROUP_M;
#else
constexpr int kRasterGroupM = kGroupM;
#endif

static_assert(kStageBytes == kStageBytesA + kStageBytesB, "stage size");
static_assert(kSmemBytesHopper == kStages * kStageBytes + kEpiBytes + 1024 + 256, "shared memory size");
static_assert(kSmemBytesPortable >= (kTileM + kTileN) * (kTileK + 8) * 2 + 128, "the portable slabs must fit");

// A builder tile configuration: 128 x BN output tiles, 64-deep stages, as many stages as fit the
// same shared-memory plan (kSmemBytes), so every configuration runs in the same grid as movers.
// BN = 256 (the constants above: one consumer warpgroup per 64-row half) is the default and the
// only one of the portable layers and of SwiGLU; BN = 192 and 128 (Hopper) give 4/3 and 2 times the
// tiles, for grids of few tiles (small M, narrow N) where whole waves matter more than per-tile
// efficiency.
// The stages and the TMA-store epilogue's staging share kRingBytes + kEpiBytes: as many stages as
// leave one 8 KB staging slot per consumer warpgroup (two for MXFP8 A; at most kMaxStages), then
// two slots where they fit, else one; the staging at the region's end. So bf16 256: 4 stages of
// 48 KB, 2 slots; 192: 5 of 40 KB, 1 slot; 128: 6 of 32 KB, 2 slots; MXFP8 A: 4, 6, 6 stages, 2
// slots. Measured (H100, notes/gemm.md session 28): the 192-wide tile's 5th stage +3-10 % (a 4th
// is worth 5-12 % at small M); the MXFP8-A 256 tile's 5th with one slot was 1-4 % slower on the
// register-path shapes, hence its two.
// MxA (Hopper): A is MXFP8, K-major (E4M3 codes, Problem::a_scales one E8M0 scale per 32 of a row):
// a stage holds A's 128 x 64 codes (8 KB, unswizzled 64-byte rows) and the consumers dequantize
// them into wgmma's register fragments (builder_wgmma.h consume_mx_slab). B is bf16 as always, its
// reduction index permuted within each 64-slab (kosmos.mx.k_permutation) to match what a thread's
// 16 consecutive codes become in the fragments.
constexpr int kMaxStages = 6;
constexpr int kRingBytes = kStages * kStageBytes;  // the stages' share of kSmemBytes
constexpr int kStageBytesAMx = kTileM * kTileK;    // 128 rows x 64 E4M3 codes
// PingPong (Hopper, BN = 128 only): each consumer warpgroup owns whole 128 x 128 tiles, the two
// taking a builder call's units in turn, so one's epilogue runs under the other's mainloop
// (builder_wgmma.h consume_pingpong); the stages and staging are the 128-wide tile's.
// Bf16Ring (with MxA): the ring and staging of the bf16 tile of that width -- 16 KB A stages, the
// codes' 8 KB at their start -- so an MXFP8-A job shares a builder call with bf16 jobs
// (run_builder_jobs: one ring; AG+NN(+NT)'s dgrad on MXFP8 dY beside its bf16 wgrad).
// MxB (with MxA; gfx950's portable layer): B is MXFP8 too (Problem::b_scales), K-major, and the
// block-scaled MFMA applies both operands' scales (builder_portable.h, gemm/mfma_mx.h).
template <int BN, bool MxA = false, bool PingPong = false, bool Bf16Ring = false, bool MxB = false>
struct TileConfig {
  static_assert(BN == 128 || BN == 192 || BN == 256, "tile widths: 128, 192 or 256");
  static_assert(!PingPong || (BN == 128 && !MxA), "ping-pong tiles: 128 x 128, bf16 operands");
  static_assert(!Bf16Ring || MxA, "the bf16 ring is a geometry for MXFP8-A tiles");
  static_assert(!MxB || (MxA && BN == 256 && !Bf16Ring), "MXFP8 B: with MXFP8 A, 128 x 256 tiles");
  static constexpr int kTileN = BN;
  static constexpr bool kMxA = MxA;
  static constexpr bool kMxB = MxB;
  static constexpr bool kPingPong = PingPong;
  static constexpr int kBoxesB = BN / 64;
  static constexpr bool kMxRing = MxA && !Bf16Ring;  // the MXFP8-A tile's own, denser ring
  static constexpr int kStageBytesA = kMxRing ? kStageBytesAMx : kosmos::gemm::kStageBytesA;
  static constexpr int kStageBytesB = kBoxesB * kBoxBytes;
  static constexpr int kStageBytes = kStageBytesA + kStageBytesB;
  static constexpr int kTxBytes = (MxA ? kStageBytesAMx : kStageBytesA) + kStageBytesB;  // what TMA brings a stage
  static constexpr int kPlanBytes = kRingBytes + kEpiBytes;
  static constexpr int kStagesFit = (kPlanBytes - 2 * (kMxRing ? 2 : 1) * kBoxBytes) / kStageBytes;
  static constexpr int kStages = kStagesFit < kMaxStages ? kStagesFit : kMaxStages;
  static constexpr int kEpiSlots = kStages * kStageBytes + 4 * kBoxBytes <= kPlanBytes ? 2 : 1;  // per warpgroup
  static constexpr int kEpiOffset = kPlanBytes - 2 * kEpiSlots * kBoxBytes;  // the staging
  // fp32 accumulators per consumer thread: m64 x BN per warpgroup (ping-pong: m128 x BN)
  static constexpr int kAcc = PingPong ? BN : BN / 2;
  static_assert(kStages * kStageBytes <= kEpiOffset && kEpiOffset % 1024 == 0, "the stages must fit the plan");
};
typedef TileConfig<kTileN> DefaultTile;
typedef TileConfig<192> MidTile;     // Hopper only
typedef TileConfig<128, false, true> PingPongTile;  // Hopper only: THE 128-wide bf16 tile (dense, grouped, TP)
typedef TileConfig<256, true> MxTile;  // Hopper only, as the two below
typedef TileConfig<192, true> MxMidTile;
typedef TileConfig<128, true> MxNarrowTile;
template <int BN> using MxInBf16Ring = TileConfig<BN, true, false, true>;  // Hopper only
typedef TileConfig<256, true, false, false, true> MxScaledTile;              // gfx950 only

// Layouts in row-major NumPy terms (named BLAS-style, as in the paper). In each, the output
// is [Mo, No] and the reduction has depth Kr:
//   TN: Y[M,N] = X[M,K] @ W[N,K]^T   a = [Mo, Kr], b = [No, Kr]   (both K-major)
//   NN: dX[M,K] = dY[M,N] @ W[N,K]   a = [Mo, Kr], b = [Kr, No]   (b MN-major)
//   NT: dW[N,K] = dY[M,N]^T @ X[M,K] a = [Kr, Mo], b = [Kr, No]   (both MN-major)
enum Layout : int { LAYOUT_TN = 0, LAYOUT_NN = 1, LAYOUT_NT = 2 };

template <int L> struct LayoutTraits {
  static constexpr bool kAKMajor = (L != LAYOUT_NT);
  static constexpr bool kBKMajor = (L == LAYOUT_TN);
};

// A CUtensorMap (128 bytes, 64-byte aligned), passed by value as a __grid_constant__ kernel
// parameter (KOSMOS_GRID_CONSTANT). Only the Hopper layer reads it; other layers use Problem's pointers.
struct alignas(64) TensorMap {
  u64 words[16];
};

// One GEMM problem as the builder sees it (for grouped GEMMs: the dimensions of one group; mo is
// then the rows of the packed operand for TN/NN, or one group's output rows for NT).
struct Problem {
  const u16* a;      // bf16, row-major, see Layout (E4M3 codes under TileConfig::kMxA)
  const u16* b;
  i32 mo, no, kr;    // output rows, output columns (of the accumulator tile grid), reduction depth
  i32 lda, ldb;      // row strides of a and b in elements
  i32 tiles_m, tiles_n, k_slabs;
  i32 swiglu_f;      // SwiGLU: columns of the gate half (b rows [0,F) gate, [F,2F) up); 0 = off
  i32 k_splits;      // split-K: work units per output tile (0 or 1 = none); unit s of a tile covers one
                     // K-range and writes its own fp32 partial (EpiStoreF32 at out + s * mo * ldo)
  i64 b_group_stride;  // grouped TN/NN: elements from one group's b to the next (portable layers)
  const u8* a_scales;  // MXFP8 A (TileConfig::kMxA): E8M0 [mo, kr / 32], a row's scales contiguous
  const u8* b_scales;  // MXFP8 B (TileConfig::kMxB): E8M0 [no, kr / 32]
};

// kosmos/gemm.py mirrors Problem as PROBLEM_DTYPE (every field checked by kosmos/runtime/mirror.py in
// CPU CI; not here in the kernels: an older NVRTC seen on a GPU image rejected __builtin_offsetof).
static_assert(sizeof(Problem) == 80, "Problem layout: see PROBLEM_DTYPE in kosmos/gemm.py");

KOSMOS_DEVICE i32 k_splits_of(const Problem& p) { return p.k_splits > 1 ? p.k_splits : 1; }

// Work units in the queue: every output tile, k_splits times.
KOSMOS_DEVICE i32 work_units(const Problem& p) { return p.tiles_m * p.tiles_n * k_splits_of(p); }

// The output column (No index) where 64-column chunk c (0..BN/64-1) of tile column tn starts.
// Without SwiGLU the chunks are contiguous. With SwiGLU, chunks 0,1 are gate columns and
// chunks 2,3 the matching up columns, so a thread holds gate and up of one output column.
template <int BN = kTileN>
KOSMOS_DEVICE i32 b_chunk_col(const Problem& p, i32 tn, i32 c) {
  if (p.swiglu_f == 0) return tn * BN + 64 * c;  // SwiGLU tiles are 256 wide (host-checked)
  const i32 base = tn * (kTileN / 2) + 64 * (c & 1);
  return c < 2 ? base : p.swiglu_f + base;
}

}  // namespace gemm
}  // namespace kosmos
