"""Summarize an ncu report on the device (where ncu is): warp-stall reasons per kernel, and the
SASS of one kernel in windows of 200 instructions (stall samples, executed warp instructions and
the commonest opcodes of each), to see whether a kernel waits in its mainloop, its epilogue or its
side work. Session 27 found the SwiGLU epilogues' problems this way (notes/moe.md).

    ncu --clock-control none --profile-from-start off --kernel-name regex:kosmos_grouped \
        --section WarpStateStats --section SourceCounters --section SpeedOfLight -o $OUT/r -f \
        python3 notes/debug/parts_ncu.py
    python3 notes/debug/ncu_summary.py $OUT/r.ncu-rep [kernel-name-for-the-SASS-windows [launch-skip]]
"""
import collections
import csv
import io
import subprocess
import sys


def ncu_csv(args: list[str]) -> list[list[str]]:
    out = subprocess.run(["ncu", "--import", *args, "--csv"], capture_output=True, text=True, check=True).stdout
    return list(csv.reader(io.StringIO(out)))


def stalls(report: str) -> None:
    rows = ncu_csv([report, "--page", "raw", "--metrics", "regex:smsp__pcsamp_warps_issue_stalled_.*"])
    hdr, data = rows[0], rows[2:]
    cols = [i for i, h in enumerate(hdr) if h.startswith("smsp__pcsamp_warps_issue_stalled") and
            not h.endswith("_not_issued")]
    name = hdr.index("Kernel Name")
    for r in data:
        v = {hdr[i].removeprefix("smsp__pcsamp_warps_issue_stalled_"): float(r[i].replace(",", "") or 0) for i in cols}
        total = sum(v.values()) or 1.0
        top = sorted(v.items(), key=lambda kv: -kv[1])[:8]
        print(f"{r[name][:34]:34s} {int(total):7d} samples  " + " ".join(f"{k}:{x / total:.0%}" for k, x in top))


def windows(report: str, kernel: str, skip: int, width: int = 200) -> None:
    rows = ncu_csv([report, "--page", "source", "--print-source", "sass", "--kernel-name", kernel,
                    "--launch-skip", str(skip), "--launch-count", "1"])
    hdr = next(r for r in rows if "Warp Stall Sampling (All Samples)" in r)
    si, ei = hdr.index("Warp Stall Sampling (All Samples)"), hdr.index("Instructions Executed")
    data = [r for r in rows[rows.index(hdr) + 1:] if len(r) > si and r[si].isdigit()]
    total = sum(int(r[si]) for r in data) or 1
    print(f"\n{kernel}: {len(data)} instructions, {total} samples")
    for s in range(0, len(data), width):
        seg = data[s:s + width]
        samples = sum(int(r[si]) for r in seg)
        executed = sum(int(r[ei].replace(",", "")) for r in seg if r[ei].replace(",", "").isdigit())
        ops = collections.Counter()
        for r in seg:
            words = r[1].split()
            if words:
                ops[(words[1] if words[0].startswith("@") and len(words) > 1 else words[0]).split(".")[0]] += 1
        print(f"{s:6d} {samples:7d} ({samples / total:5.1%}) executed {executed:11d}  "
              + " ".join(f"{k}:{n}" for k, n in ops.most_common(6)))


if __name__ == "__main__":
    stalls(sys.argv[1])
    if len(sys.argv) > 2:
        windows(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0)
