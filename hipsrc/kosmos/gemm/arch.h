// Which matrix-instruction layer the GEMM builder uses on the target being compiled.
// (This file, like the other *wgmma* / *mma* / *mfma* / *arch* headers, may test platform macros.)
//   KOSMOS_GEMM_WGMMA     Hopper sm_90a: TMA + mbarrier pipeline + wgmma, warp-specialized
//   KOSMOS_GEMM_MMA_SYNC  other NVIDIA GPUs (sm_80+): mma.sync.m16n8k16 bf16, portable loads
//   KOSMOS_GEMM_MFMA      AMD CDNA3 (gfx942) and later: v_mfma_f32_32x32x8_bf16
// -DKOSMOS_GEMM_FORCE_PORTABLE selects the mma.sync path on Hopper too (to test it there).
#pragma once
#include "../platform.h"

#if KOSMOS_AMD
#define KOSMOS_GEMM_MFMA 1
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL) && !defined(KOSMOS_GEMM_FORCE_PORTABLE)
#define KOSMOS_GEMM_WGMMA 1
#else
#define KOSMOS_GEMM_MMA_SYNC 1
#endif

// Kernel parameters that must stay in the constant bank (TMA descriptors).
#if KOSMOS_NVIDIA
#define KOSMOS_GRID_CONSTANT __grid_constant__
#else
#define KOSMOS_GRID_CONSTANT
#endif

namespace kosmos {
namespace gemm {
// 1 when the Hopper wgmma layer is compiled in; kosmos_gemm_arch() reports it to the host.
#if KOSMOS_GEMM_WGMMA
constexpr int kArchPath = 1;
#elif KOSMOS_GEMM_MMA_SYNC
constexpr int kArchPath = 2;
#else
constexpr int kArchPath = 3;
#endif
// 1 when this compile has the sm_90a feature set (wgmma, setmaxnreg): the host checks it so a
// change in CuPy's options cannot silently drop the Hopper layer.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr int kSm90aFeatures = 1;
#else
constexpr int kSm90aFeatures = 0;
#endif
}  // namespace gemm
}  // namespace kosmos
