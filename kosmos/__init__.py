"""kosmos: self-scheduling persistent kernels that overlap GPU communication with GEMMs.

One MPI rank per GPU; CuPy arrays in and out; no PyTorch.
"""
from .errors import KosmosCompileError, KosmosError, KosmosResourceError, KosmosTimeoutError
from .world import World


def __getattr__(name: str):
    # The collectives need CuPy; import them on first use so `import kosmos` works on CPU-only hosts.
    if name in ("all_gather", "reduce_scatter", "all_to_all", "AllGather", "ReduceScatter", "AllToAll"):
        from . import collectives

        return getattr(collectives, name)
    if name == "matmul":
        from .gemm import matmul

        return matmul
    if name == "grouped_matmul":
        from .grouped import grouped_matmul

        return grouped_matmul
    if name in ("gemm", "grouped", "tp", "collectives"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    if name == "SymmetricHeap":
        from .symmetric import SymmetricHeap

        return SymmetricHeap
    raise AttributeError(f"module 'kosmos' has no attribute {name!r}")


__all__ = [
    "World", "SymmetricHeap", "matmul", "grouped_matmul", "all_gather", "reduce_scatter", "all_to_all", "AllGather", "ReduceScatter",
    "AllToAll", "KosmosError", "KosmosTimeoutError", "KosmosCompileError", "KosmosResourceError",
]
__version__ = "0.1.0"
