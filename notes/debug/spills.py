"""ptxas's spill stores (sm_90a, as kosmos.runtime.check compiles) of the kernels of one hipsrc file
whose names contain any of the given parts, and any serialized wgmma; no GPU needed.
    PYTHONPATH=. python3 notes/debug/spills.py tp.hip ag_nn_nt [more name parts]
"""
import sys

import cupy  # noqa: F401 - loads the CUDA libraries CuPy finds in the pip wheels
from cupy_backends.cuda.libs import nvrtc

from kosmos.runtime.check import serialized_wgmma, spill_stores
from kosmos.runtime.source import compile_options, hipsrc_dir

path = hipsrc_dir() / sys.argv[1]
opts = list(compile_options("cuda", "sm_90a")) + ["--device-as-default-execution-space", "-ftz=true",
                                                  "--ptxas-options=-v"]
prog = nvrtc.createProgram(path.read_text(), path.name, [], [])
nvrtc.compileProgram(prog, opts)
log = nvrtc.getProgramLog(prog)
for fn, n in sorted(spill_stores(log).items()):
    if any(s in fn for s in sys.argv[2:]):
        print(n, fn)
print("serialized wgmma:", serialized_wgmma(log) or "none")
