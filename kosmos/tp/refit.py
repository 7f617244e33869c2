"""Refit the per-GPU numbers behind the crew rules (kosmos/configs/hardware.yaml) from benchmarks.

    python3 -m kosmos.tp.refit --collectives bench/results/collectives_w8.json \\
                               --gemm bench/results/gemm_NVIDIA_H200_<date>_<tag>.json [--write]

The crew rules (kosmos/tp/heuristics.py) take three measured rates per GPU kind:
  link_GBps            the fastest all-gather bus bandwidth per rank (ours or NCCL's), largest size;
  mover_GBps_per_sm    ours at the smallest mover crews (before the link saturates), per mover CTA;
  builder_TFLOPs_per_sm  our GEMM's median TFLOP/s over the bench's shapes on the whole GPU, per SM.
Without --write it prints the entry; with it, it rewrites that GPU's entry in hardware.yaml.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from importlib import resources
from pathlib import Path
from typing import Any


def link_and_mover_rates(collectives: dict[str, Any]) -> tuple[float, float, str]:
    """(link GB/s, mover GB/s per CTA, a note naming the rows used) from bench/collectives.py's JSON."""
    rows = [r for r in collectives.get("collectives", []) if r["op"] == "all_gather"]
    if collectives.get("world_size", 1) < 2 or not rows:
        raise ValueError("the collectives JSON has no all-gather rows: run bench/collectives.py on 2 or more GPUs")
    if collectives.get("oversubscribed"):
        raise ValueError("the collectives JSON comes from ranks sharing a GPU: its rates mean nothing")
    size = max(r["mib_per_rank"] for r in rows)
    at_size = [r for r in rows if r["mib_per_rank"] == size]
    link = max(r["bus_GBps"] for r in at_size)
    ours = [(int(r["impl"].split("/")[1]), r["bus_GBps"]) for r in at_size if r["impl"].startswith("kosmos/")]
    if not ours:
        raise ValueError("no kosmos all-gather rows (impl 'kosmos/<crew>') at the largest size")
    crew, gbps = min(ours)
    note = (f"all-gather, {size:g} MiB per rank, world {collectives['world_size']}, commit {collectives.get('commit')}: "
            f"link = best bus GB/s, mover = ours at the smallest crew ({crew} CTAs)")
    return link, gbps / crew, note


def builder_rate(gemm: dict[str, Any]) -> tuple[float, str]:
    """(median TFLOP/s per SM of our GEMM on the whole GPU, a note) from bench/gemm.py's JSON."""
    sms = int(gemm["sms"])
    rates = [r["ours"][str(sms)]["tflops"] for r in gemm["results"] if str(sms) in r.get("ours", {})]
    if not rates:
        raise ValueError(f"no full-GPU ({sms} SMs) rows in the GEMM JSON")
    med = statistics.median(rates)
    return med / sms, f"median of our GEMM over {len(rates)} shapes on {sms} SMs, {med:.0f} TFLOP/s, commit {gemm.get('commit')}"


def entry(gpu: str, sms: int, link: float, mover: float, builder: float, notes: list[str]) -> str:
    """The YAML text of one hardware.yaml entry."""
    lines = [f"{gpu}:", f"  sms: {sms}", f"  link_GBps: {link:.0f}", f"  mover_GBps_per_sm: {mover:.1f}",
             f"  builder_TFLOPs_per_sm: {builder:.2f}"]
    return "\n".join(lines + [f"  # refit: {n}" for n in notes]) + "\n"


def replace_entry(yaml_text: str, gpu: str, new_entry: str) -> str:
    """yaml_text with the top-level block `gpu:` replaced by new_entry (appended if absent)."""
    pattern = re.compile(rf"^{re.escape(gpu)}:\n(?:(?: .*)?\n)*", re.M)
    if pattern.search(yaml_text):
        return pattern.sub(lambda _: new_entry, yaml_text, count=1)
    return yaml_text.rstrip("\n") + "\n" + new_entry


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collectives", type=Path, required=True, help="bench/collectives.py JSON from 2+ GPUs")
    ap.add_argument("--gemm", type=Path, required=True, help="bench/gemm.py JSON")
    ap.add_argument("--write", action="store_true", help="rewrite this GPU's entry in kosmos/configs/hardware.yaml")
    args = ap.parse_args(argv)
    coll = json.loads(args.collectives.read_text())
    gemm = json.loads(args.gemm.read_text())
    link, mover, n1 = link_and_mover_rates(coll)
    builder, n2 = builder_rate(gemm)
    text = entry(coll["gpu"], int(gemm["sms"]), link, mover, builder, [n1, n2])
    print(text, end="")
    if args.write:
        path = Path(str(resources.files("kosmos.configs").joinpath("hardware.yaml")))
        path.write_text(replace_entry(path.read_text(), coll["gpu"], text))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
