"""kosmos: self-scheduling persistent kernels that overlap GPU communication with GEMMs.

One MPI rank per GPU; CuPy arrays in and out; no PyTorch.
"""
from .errors import KosmosCompileError, KosmosError, KosmosResourceError, KosmosTimeoutError
from .world import World

__all__ = ["World", "KosmosError", "KosmosTimeoutError", "KosmosCompileError", "KosmosResourceError"]
__version__ = "0.1.0"
