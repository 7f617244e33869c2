"""launch/examples/moe_train.py's float64 NumPy run (the reference its GPU run is compared with) trains:
the loss of the teacher-student MoE block falls, at world sizes 1 and 2 (emulated)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "launch" / "examples" / "moe_train.py"


@pytest.mark.parametrize("world", [1, 2])
def test_the_numpy_run_learns(world, capsys):
    spec = importlib.util.spec_from_file_location("moe_train", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--numpy", "--world", str(world), "--steps", "40", "--tokens", "64", "--log", "10",
                     "--min-drop", "0.2"]) == 0
    assert "lower)" in capsys.readouterr().out
