"""The paper's GEMM shapes (Llama 3 8B / 70B / 405B, Tables C.3-C.12): kosmos/configs/llama3_shapes.yaml
as PaperShape records, in the paper's BLAS convention (output M x N, reduction K) with the layout
each TP+SP kernel runs them in. Read by bench/gemm.py, bench/tp.py and the tests."""
from __future__ import annotations

from dataclasses import dataclass

from .gemm import LAYOUTS


@dataclass(frozen=True)
class PaperShape:
    kernel: str  # ag_tn, tn_rs, ag_nn, bulk_ag_nn, bulk_rs_nt
    name: str    # e.g. 405B-FC1-MBS1
    m: int       # the paper's BLAS convention: output M x N, reduction K
    n: int
    k: int
    layout: str

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    def operand_shapes(self) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
        """(a.shape, b.shape, out.shape) for matmul(a, b, self.layout)."""
        m, n, k = self.m, self.n, self.k
        if self.layout == "TN":
            return (m, k), (n, k), (m, n)
        if self.layout == "NN":
            return (m, k), (k, n), (m, n)
        return (k, m), (k, n), (m, n)  # NT: tokens are the reduction


def load_llama3_shapes(path: str | None = None) -> list[PaperShape]:
    """Every shape of kosmos/configs/llama3_shapes.yaml, in file order."""
    import os

    import yaml

    path = path or os.path.join(os.path.dirname(__file__), "configs", "llama3_shapes.yaml")
    with open(path) as f:
        doc = yaml.safe_load(f)
    layouts = doc["layouts"]
    out = []
    for kernel, rows in doc["kernels"].items():
        layout = layouts[kernel]
        if layout not in LAYOUTS:
            raise ValueError(f"{path}: kernel {kernel} has unknown layout {layout!r}")
        for name, m, n, k in rows:
            out.append(PaperShape(kernel, str(name), int(m), int(n), int(k), layout))
    return out
