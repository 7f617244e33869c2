// The MoE layer's fused backward (MoEBackward) with fp32 weight gradients: the experts' part from
// the dispatch to the fold in one launch (hipsrc/kosmos/moe/backward.h; the kernel: fused.h).
#include "kosmos/moe/backward.h"
#include "kosmos/moe/fused.h"

using namespace kosmos;
using namespace kosmos::gemm;
using namespace kosmos::moe;

KOSMOS_MOE_BACKWARD_KERNEL(kosmos_moe_backward_f32, EpiStoreF32)
