"""kosmos.tp.refit: the hardware numbers of the crew rules, refit from benchmark JSON (synthetic here)."""
from __future__ import annotations

import json

import pytest
import yaml

from kosmos.tp import refit
from kosmos.tp.heuristics import Hardware


def collectives(world=8, oversubscribed=False):
    rows = []
    for mib in (4.0, 256.0):
        for crew, gbps in ((8, 240.0), (16, 380.0), (64, 430.0)):
            rows.append({"op": "all_gather", "impl": f"kosmos/{crew}", "mib_per_rank": mib, "bus_GBps": gbps * mib / 256})
        rows.append({"op": "all_gather", "impl": "NCCL", "mib_per_rank": mib, "bus_GBps": 440.0 * mib / 256})
        rows.append({"op": "reduce_scatter", "impl": "kosmos/8", "mib_per_rank": mib, "bus_GBps": 999.0})
    return {"gpu": "NVIDIA H200", "world_size": world, "oversubscribed": oversubscribed, "commit": "abc",
            "collectives": rows}


def gemm():
    return {"sms": 132, "commit": "def", "results": [{"ours": {"132": {"tflops": t}, "66": {"tflops": 1.0}}}
                                                      for t in (600.0, 660.0, 700.0)]}


def test_rates_come_from_the_largest_size_and_the_smallest_crew():
    link, mover, note = refit.link_and_mover_rates(collectives())
    assert link == 440.0          # NCCL's all-gather was the fastest at 256 MiB
    assert mover == 240.0 / 8     # ours with 8 mover CTAs, per CTA (reduce-scatter rows ignored)
    assert "256 MiB" in note
    per_sm, _ = refit.builder_rate(gemm())
    assert per_sm == pytest.approx(660.0 / 132)


@pytest.mark.parametrize("bad", [collectives(world=1), collectives(oversubscribed=True)])
def test_refuses_numbers_that_mean_nothing(bad):
    with pytest.raises(ValueError):
        refit.link_and_mover_rates(bad)


def test_written_entry_replaces_only_that_gpu_and_parses(tmp_path):
    text = ("# header\nNVIDIA H200:\n  sms: 132\n  link_GBps: 1   # old\n  mover_GBps_per_sm: 1\n"
            "  builder_TFLOPs_per_sm: 1\n\ndefault:\n  sms: 132\n  link_GBps: 450\n  mover_GBps_per_sm: 25.0\n"
            "  builder_TFLOPs_per_sm: 6.0\n")
    new = refit.entry("NVIDIA H200", 132, 440.0, 30.0, 5.0, ["a note"])
    out = refit.replace_entry(text, "NVIDIA H200", new)
    table = {k: Hardware(**{f: v for f, v in vals.items()}) for k, vals in yaml.safe_load(out).items()}
    assert table["NVIDIA H200"] == Hardware(132, 440, 30.0, 5.0)
    assert table["default"] == Hardware(132, 450, 25.0, 6.0)
    assert out.startswith("# header\n")
    appended = refit.replace_entry(text, "AMD MI355X", refit.entry("AMD MI355X", 256, 1.0, 2.0, 3.0, []))
    assert set(yaml.safe_load(appended)) == {"NVIDIA H200", "default", "AMD MI355X"}


def test_cli_prints_the_entry(tmp_path, capsys):
    c, g = tmp_path / "c.json", tmp_path / "g.json"
    c.write_text(json.dumps(collectives()))
    g.write_text(json.dumps(gemm()))
    assert refit.main(["--collectives", str(c), "--gemm", str(g)]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load(out)["NVIDIA H200"]["mover_GBps_per_sm"] == 30.0
