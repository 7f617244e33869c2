"""bench/link_counters.py: nvidia-smi's NVLink data counters read and summed over links (its
output format fed in), and nothing claimed where they cannot be read."""
from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

spec = importlib.util.spec_from_file_location("link_counters", Path(__file__).parents[1] / "bench" / "link_counters.py")
link_counters = importlib.util.module_from_spec(spec)
spec.loader.exec_module(link_counters)

SAMPLE = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0000)
	 Link 0: Data Tx: 1000 KiB
	 Link 0: Data Rx: 2000 KiB
	 Link 1: Data Tx: 30 KiB
	 Link 1: Data Rx: 4 KiB
"""


def fake_smi(monkeypatch, stdout):
    monkeypatch.setattr(link_counters.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    seen = []

    def run(cmd, **kw):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout=stdout, stderr="")
    monkeypatch.setattr(link_counters.subprocess, "run", run)
    return seen


def test_the_links_data_counters_are_summed(monkeypatch):
    seen = fake_smi(monkeypatch, SAMPLE)
    assert link_counters.link_kib("00000000:19:00.0") == (1030, 2004)
    assert seen == [["nvidia-smi", "nvlink", "-gt", "d", "-i", "00000000:19:00.0"]]


def test_no_links_or_no_tool_reads_as_none(monkeypatch):
    fake_smi(monkeypatch, "GPU 0: NVIDIA H200 (UUID: GPU-0000)\n")  # no NVLink counters printed
    assert link_counters.link_kib("0") is None
    monkeypatch.setattr(link_counters.shutil, "which", lambda name: None)
    assert link_counters.link_kib("0") is None


def test_one_rank_measures_nothing():
    class Alone:
        size, oversubscribed = 1, False
    assert link_counters.measure_link_bytes(Alone(), lambda i: None) is None
