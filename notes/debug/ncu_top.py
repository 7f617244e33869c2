"""The hottest instructions of one kernel in an ncu report (on the device, where ncu is): the N
instructions with the most warp-stall samples, each with its index, SASS and every per-reason
stall column the report holds, so a stall can be traced to one instruction and its neighbours.

    python3 notes/debug/ncu_top.py REPORT KERNEL-REGEX [launch-skip [N]]

The report needs the SourceCounters section (ncu ... --section SourceCounters).
"""
import csv
import io
import subprocess
import sys

report, kernel = sys.argv[1], sys.argv[2]
skip = int(sys.argv[3]) if len(sys.argv) > 3 else 0
top = int(sys.argv[4]) if len(sys.argv) > 4 else 40
out = subprocess.run(["ncu", "--import", report, "--page", "source", "--print-source", "sass", "--csv",
                      "--kernel-name", kernel, "--launch-skip", str(skip), "--launch-count", "1"],
                     capture_output=True, text=True, check=True).stdout
rows = list(csv.reader(io.StringIO(out)))
hdr = next(r for r in rows if "Warp Stall Sampling (All Samples)" in r)
si = hdr.index("Warp Stall Sampling (All Samples)")
data = [r for r in rows[rows.index(hdr) + 1:] if len(r) > si and r[si].isdigit()]
total = sum(int(r[si]) for r in data) or 1
print("columns:", " | ".join(hdr))
print(f"{kernel} launch {skip}: {len(data)} instructions, {total} samples")
extra = [i for i, h in enumerate(hdr) if i > si and r"%" not in h][:6]
for n, r in sorted(enumerate(data), key=lambda nr: -int(nr[1][si]))[:top]:
    print(f"{n:5d} {int(r[si]) / total:6.1%} {r[1][:70]:70s} " + " ".join(r[i] for i in extra))
