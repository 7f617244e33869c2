"""Host mirrors of the TP+SP kernels' parameter structs (hipsrc/kosmos/tp_params.h).

A fused op builds its record once per set of operand addresses and sets only `c.epoch` per call.
Field order, offsets and sizes are checked against the C structs at compile time
(kosmos.runtime.mirror, tests/test_compile.py).
"""
from __future__ import annotations

import numpy as np

from ..gemm import EPI_DTYPE, PROBLEM_DTYPE, STREAM_K_DTYPE
from ..runtime.mirror import StructMirror, record  # noqa: F401 - record: the ops build their records with it
from ..runtime.status import WAIT_CTX_DTYPE

_u64, _i32, _u32 = np.uint64, np.int32, np.uint32

TP_COMMON_DTYPE = np.dtype(
    [("p", PROBLEM_DTYPE), ("wait", WAIT_CTX_DTYPE), ("peer_bases", _u64), ("mine", _u64), ("tile_order", _u64),
     ("epoch", _u64), ("flags_off", _u64), ("rank", _i32), ("world", _i32), ("movers", _i32), ("policy", _i32),
     ("n_tiles", _i32), ("pad_", _i32)],
    align=True,
)

AG_PARAMS_DTYPE = np.dtype(
    [("c", TP_COMMON_DTYPE), ("epi", EPI_DTYPE), ("shard_off", _u64), ("gathered", _u64), ("arrived", _u64),
     ("x", _u64), ("m", _u64), ("row_bytes", _u64), ("mover_order", _u64), ("items_per_chunk", _i32),
     ("tiles_m_per_chunk", _i32), ("n_mover_items", _i32), ("mover_threads", _u32), ("scales_off", _u64),
     ("x_scales", _u64), ("mx_blocks", _i32), ("pad_", _i32), ("gathered_scales", _u64)],
    align=True,
)

AG_NT_PARAMS_DTYPE = np.dtype(
    [("a", AG_PARAMS_DTYPE), ("p2", PROBLEM_DTYPE), ("epi2", EPI_DTYPE), ("shard_off2", _u64), ("scales_off2", _u64),
     ("gathered2", _u64), ("arrived2", _u64), ("x2", _u64), ("x_scales2", _u64), ("mx_blocks2", _i32),
     ("n_tiles2", _i32), ("sk2", STREAM_K_DTYPE)],
    align=True,
)

RS_PARAMS_DTYPE = np.dtype(
    [("c", TP_COMMON_DTYPE), ("epi", EPI_DTYPE), ("staging_off", _u64), ("buffer_bytes", _u64), ("m", _u64),
     ("cols", _u64), ("x", _u64), ("out", _u64), ("reduce_order", _u64), ("band_rows", _u64),
     ("n_reduce_items", _i32), ("slice_log2", _u32), ("max_join", _i32), ("pad_", _i32), ("sk", STREAM_K_DTYPE)],
    align=True,
)

MIRRORS = [
    StructMirror("kosmos::tp::TpCommon", TP_COMMON_DTYPE),
    StructMirror("kosmos::tp::AgParams", AG_PARAMS_DTYPE),
    StructMirror("kosmos::tp::AgNtParams", AG_NT_PARAMS_DTYPE),
    StructMirror("kosmos::tp::RsParams<kosmos::gemm::EpiStoreBf16>", RS_PARAMS_DTYPE),
    StructMirror("kosmos::tp::RsParams<kosmos::gemm::EpiStoreF32>", RS_PARAMS_DTYPE),
]
