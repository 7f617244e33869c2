"""The Hopper layer's register epilogues that move four n8 blocks at a time (EpiSwiGLU,
EpiSwiGLUBackward, and EpiStoreBf16 / EpiStoreF32 through EpiQuad: quad(), a 4 x 4 transpose
across a quad's lanes, then 16-byte runs), compiled for the host with a warp's 32 lanes as threads
whose shuffles meet (tests/host/epilogue_main.cpp, hipsrc/kosmos/gemm/fragment.h's walk): every
byte they write must be what the same epilogue writes one pair at a time, with no shuffle, over
the same accumulators -- whole tiles, tiles whose rows end inside the warp's 16, and tiles cut by
the output's last column. The GPU tests check the values (tests/gpu/test_grouped.py,
test_gemm.py); this checks the lanes' bookkeeping on every CI run.
"""
from __future__ import annotations

import struct
import subprocess

import pytest

from host_build import build

CASES = {"swiglu": 0, "swiglu keeping pre": 1, "swiglu backward": 2, "bf16 store": 3, "fp32 store": 4}


@pytest.fixture(scope="module")
def epilogue_host(tmp_path_factory):
    return build("epilogue_main.cpp", tmp_path_factory.mktemp("epilogue") / "epilogue_host", threads=True)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("row_end, col0, f", [(16, 0, 256), (13, 128, 192), (9, 0, 128), (1, 128, 512), (13, 0, 320)])
def test_quad_epilogue_writes_what_the_pairs_write(epilogue_host, case, row_end, col0, f):
    which = CASES[case]
    got = subprocess.run([str(epilogue_host)], input=struct.pack("<4iI", which, row_end, col0, f, 1 + row_end + f),
                         capture_output=True, timeout=60)
    assert got.returncode == 0, got.stdout.decode() + got.stderr.decode()
    out = got.stdout.decode().split()
    assert out[0] == "same"
    # the bytes the tile owns in the output: rows below row_end, columns below f
    h_cols = max(0, min(128, f - col0))
    upper = max(0, min(128, f - col0 - 128))  # the tile's upper half (not SwiGLU's: its up columns)
    want = row_end * {2: 2 * (h_cols + upper), 3: h_cols + upper, 4: h_cols + upper}.get(which, h_cols)
    assert int(out[1]) == want
    assert int(out[2]) == (row_end * 2 * h_cols if which == 1 else 0)  # the kept [gate, up]
