"""SASS of kernels on this CPU machine, no GPU: NVRTC's own cubin (what runs: the same compiler as
the GPU's CuPy) -> nvdisasm (pip's nvidia-cuda-nvdisasm, e.g. `pip download nvidia-cuda-nvdisasm
--no-deps` and unzip; on PATH or in this Python's site-packages). CuPy's nvrtc.getCUBIN drops the
cubin's last byte (its program headers end one byte past the buffer: nvdisasm calls it an invalid
ELF), so one zero byte is put back. Prints each kernel's instruction count, ptxas's frame line and
commonest opcodes (BRA, CALL, STG, SHFL... tell a branchy or u32-at-a-time epilogue: notes/moe.md,
session 27); --lines N: also the N source lines (innermost, from -lineinfo) with the most
instructions, and the spill refills / stores (LDL / STL) by line; --out OUT: the SASS to OUT.<kernel>.

    PYTHONPATH=. python3 notes/debug/sass.py hipsrc/moe_fused_forward.hip kosmos_moe_forward [--lines 30] [--out OUT]
"""
import argparse
import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path

import cupy  # noqa: F401 - loads the CUDA libraries CuPy finds in the pip wheels
from cupy_backends.cuda.libs import nvrtc

from kosmos.runtime.source import compile_options


OPCODE = re.compile(r"\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_]+)")  # an instruction line: its opcode, group 2


def nvdisasm() -> str:
    found = shutil.which("nvdisasm") or next(Path(sys.prefix).glob("lib/python3*/site-packages/nvidia/cu13/bin/nvdisasm"), None)
    if found is None:
        raise SystemExit("no nvdisasm: pip download nvidia-cuda-nvdisasm --no-deps, unzip, put its bin/ on PATH")
    return str(found)


def by_line(body: str, top: int) -> None:
    """Instructions per innermost source line (nvdisasm -gi's `//## File "...", line N` blocks)."""
    count, spills = collections.Counter(), collections.Counter()
    where, in_block = "?", False
    for line in body.splitlines():
        m = re.search(r'## File "([^"]+)", line (\d+)', line)
        if m:
            if not in_block:
                where = f"{Path(m.group(1)).name}:{m.group(2)}"
            in_block = True
            continue
        m = OPCODE.search(line)
        if m:
            in_block = False
            count[where] += 1
            if m.group(2) in ("LDL", "STL"):
                spills[f"{where} {m.group(2)}"] += 1
    print("  most instructions:", ", ".join(f"{w} {n}" for w, n in count.most_common(top)))
    print("  local memory (LDL/STL):", ", ".join(f"{w} {n}" for w, n in spills.most_common(top)) or "none")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path", type=Path)
    ap.add_argument("kernels", help="comma-separated kernel names")
    ap.add_argument("--lines", type=int, default=0)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    opts = list(compile_options("cuda", "sm_90a")) + ["--device-as-default-execution-space", "-ftz=true",
                                                      "--ptxas-options=-v", "-lineinfo"]
    prog = nvrtc.createProgram(args.path.read_text(), args.path.name, [], [])
    try:
        nvrtc.compileProgram(prog, opts)
    except Exception:
        print(nvrtc.getProgramLog(prog))
        raise
    log = nvrtc.getProgramLog(prog)
    log = log.decode() if isinstance(log, bytes) else log
    cubin = Path("/tmp/kosmos_sass.cubin")
    cubin.write_bytes(nvrtc.getCUBIN(prog) + b"\0")
    out = subprocess.run([nvdisasm(), "-c", "-gi", str(cubin)], capture_output=True, text=True, check=True).stdout
    sec = re.split(r"\n\s*\.text\.", out)
    for kern in args.kernels.split(","):
        body = next(s for s in sec if s.startswith(kern + ":"))
        if args.out:
            Path(args.out + "." + kern).write_text(body)
        ops = collections.Counter()
        for line in body.splitlines():
            m = OPCODE.search(line)
            if m:
                ops[m.group(2)] += 1
        frame = re.search(r"Function properties for " + kern + r"\n\s*(.*)\n", log)  # ptxas -v
        print(kern, sum(ops.values()), "instr;", frame.group(1).strip() if frame else "", ";",
              " ".join(f"{k}:{v}" for k, v in ops.most_common(24)))
        if args.lines:
            by_line(body, args.lines)


if __name__ == "__main__":
    main()
