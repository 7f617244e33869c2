"""MXFP8 format kernels on one GPU: kosmos.mx.dequantize_device (row- and column-blocked) and
quantize_both, against a bf16 device copy of the same output in the same run.

    python3 bench/mx_kernels.py

Median of 20 timed calls after 3 of warm-up, contenders interleaved (kosmos.timing, device events
behind the stream blocker). Bandwidth counts codes + scales + bf16 for the dequantize, read + write
for the copy.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kosmos import mx  # noqa: E402
from kosmos.dtypes import random_bf16  # noqa: E402
from kosmos.timing import check_timeable, device_name, git_commit, time_calls  # noqa: E402
from kosmos.world import World  # noqa: E402


def main() -> int:
    import cupy

    with World() as w:
        check_timeable(w)
        print(f"bench/mx_kernels.py: {device_name()}, commit {git_commit()}, world {w.size}", flush=True)
        for rows, cols in ((8192, 8192), (16384, 4096), (4096, 28672)):
            x = random_bf16((rows, cols), 1)
            row, col = mx.quantize_both(x)
            o, y = cupy.empty_like(x), cupy.empty_like(x)
            t = time_calls(w, {"deq_rows": lambda i: mx.dequantize_device(row, out=o),
                               "deq_cols": lambda i: mx.dequantize_device(col, out=o),
                               "quantize_both": lambda i: mx.quantize_both(x),
                               "bf16 copy": lambda i: cupy.copyto(y, x)}, 3, 20)
            deq_gb, copy_gb = rows * cols * (1 + 1 / 32 + 2) / 1e9, rows * cols * 4 / 1e9  # GB / ms = TB/s
            print(f"{rows}x{cols}: " + "  ".join(f"{k} {v.median_ms * 1e3:.1f} us" for k, v in t.items())
                  + f"  deq_rows {deq_gb / t['deq_rows'].median_ms:.2f} TB/s"
                  f"  copy {copy_gb / t['bf16 copy'].median_ms:.2f} TB/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
