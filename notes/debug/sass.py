"""SASS of kernels on this CPU machine, no GPU: NVRTC's PTX -> the local ptxas (CUDA 13.0; the PTX's
.version line lowered to its 9.0) -> nvdisasm (pip's nvidia-cuda-nvdisasm; it does not read NVRTC
13.5's own cubins). Prints each kernel's instruction count and commonest opcodes (BRA, CALL, STG,
SHFL... tell a branchy or u32-at-a-time epilogue: notes/moe.md, session 27); writes the SASS to
OUT.<kernel> when OUT is given. ptxas's 13.0 code can differ a little from the driver's.

    PYTHONPATH=. python3 notes/debug/sass.py hipsrc/grouped.hip kosmos_grouped_tn_swiglu[,more] [OUT]
"""
import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path
import cupy  # noqa
from cupy_backends.cuda.libs import nvrtc
from kosmos.runtime.source import compile_options
path = Path(sys.argv[1]); kerns = sys.argv[2].split(",")
opts = [o for o in compile_options("cuda", "sm_90a") if not o.startswith("-arch")] + [
    "-arch=compute_90a", "--device-as-default-execution-space", "-ftz=true"]
prog = nvrtc.createProgram(path.read_text(), path.name, [], [])
try:
    nvrtc.compileProgram(prog, opts)
except Exception:
    print(nvrtc.getProgramLog(prog)); raise
ptx = nvrtc.getPTX(prog).decode().replace(".version 9.5", ".version 9.0", 1)
Path("/tmp/kosmos_sass.ptx").write_text(ptx)
r = subprocess.run(["/usr/local/cuda/bin/ptxas", "-arch=sm_90a", "-v", "/tmp/kosmos_sass.ptx", "-o", "/tmp/kosmos_sass.cubin"], capture_output=True, text=True)
if r.returncode: print(r.stderr); sys.exit(1)
nvd = shutil.which("nvdisasm") or next(Path(sys.prefix).glob("lib/python3*/site-packages/nvidia/cu13/bin/nvdisasm"))
out = subprocess.run([nvd, "-c", "/tmp/kosmos_sass.cubin"], capture_output=True, text=True).stdout
sec = re.split(r"\n\s*\.text\.", out)
for kern in kerns:
    body = next(s for s in sec if s.startswith(kern + ":"))
    if len(sys.argv) > 3: Path(sys.argv[3] + "." + kern).write_text(body)
    ops = collections.Counter()
    for line in body.splitlines():
        m = re.search(r"\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_]+)", line)
        if m: ops[m.group(2)] += 1
    frame = re.search(r"Function properties for " + kern + r"\n\s*(.*)\n", r.stderr)  # ptxas -v
    print(kern, sum(ops.values()), "instr;", frame.group(1).strip() if frame else "", ";",
          " ".join(f"{k}:{v}" for k, v in ops.most_common(24)))
