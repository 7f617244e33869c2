"""SASS of one kernel, compiled here (no GPU) as CuPy compiles it: where its spills sit.

    python3 notes/debug/sass.py hipsrc/moe_fused.hip kosmos_moe_backward_f32 [--arch sm_90a] [--out f.sass]

Prints the kernel's HGMMA regions and the spill stores/loads (STL/LDL) within 150 lines of them
(a spill in the mainloop costs speed; in the epilogue or side work much less). nvdisasm comes with
the nvidia-cuda-nvdisasm wheel; CuPy's nvrtc.getCUBIN drops the cubin's last byte, put back here.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kosmos.runtime.check import compile_options  # noqa: E402


def cubin(path: Path, arch: str) -> bytes:
    from cupy_backends.cuda.libs import nvrtc

    opts = list(compile_options("cuda", arch)) + ["--device-as-default-execution-space", "-ftz=true"]
    prog = nvrtc.createProgram(path.read_text(), path.name, [], [])
    try:
        nvrtc.compileProgram(prog, opts)
        return nvrtc.getCUBIN(prog) + b"\0"
    finally:
        nvrtc.destroyProgram(prog)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("source", type=Path)
    ap.add_argument("kernel")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import nvidia

    nvdisasm = next(q for p in nvidia.__path__ for q in Path(p).glob("*/bin/nvdisasm"))
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin(args.source, args.arch))
        f.flush()
        text = subprocess.run([str(nvdisasm), "-c", f.name], check=True, capture_output=True, text=True).stdout
    start = text.find(f".text.{args.kernel}:")
    if start < 0:
        raise SystemExit(f"{args.kernel} not in {args.source}")
    end = text.find("//---------------------", start)
    lines = text[start:end if end > 0 else None].splitlines()
    if args.out:
        args.out.write_text("\n".join(lines))
    hgmma = [i for i, s in enumerate(lines) if "HGMMA" in s]
    spills = [i for i, s in enumerate(lines) if re.search(r"\b(STL|LDL)\b", s)]
    regions: list[list[int]] = []
    for h in hgmma:
        if regions and h - regions[-1][1] < 300:
            regions[-1][1] = h
        else:
            regions.append([h, h])
    near = [s for s in spills if any(a - 150 <= s <= b + 150 for a, b in regions)]
    print(f"{args.kernel} ({args.arch}): {len(lines)} lines, {len(hgmma)} HGMMA in {len(regions)} regions "
          f"{regions}, {len(spills)} STL/LDL, {len(near)} within 150 lines of an HGMMA region")
    for s in near:
        print(f"  {s}: {lines[s].strip()[:110]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
