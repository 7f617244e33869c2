"""The device routing rule (hipsrc/kosmos/moe/route.h) compiled for the host and run on the CPU,
against the float64 reference: the same decisions on every model configuration and on exact ties,
weights within 1e-6. (The GPU run of the same rule, with the dispatch plan: tests/gpu/test_moe_route.py.)
Needs a host C++ compiler (c++, g++ or clang++); without one it skips, unless KOSMOS_REQUIRE_TOOLCHAINS=1.
"""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kosmos.moe import MoEConfig, load_models, reference
from kosmos.moe.route import CONSTANTS
from kosmos.runtime.source import hipsrc_dir

HERE = Path(__file__).resolve().parent / "host"


@pytest.fixture(scope="module")
def route_host(tmp_path_factory) -> Path:
    cxx = next((c for c in ("c++", "g++", "clang++", "clang++-22") if shutil.which(c)), None)
    if cxx is None:
        if os.environ.get("KOSMOS_REQUIRE_TOOLCHAINS") == "1":
            pytest.fail("no host C++ compiler and KOSMOS_REQUIRE_TOOLCHAINS=1")
        pytest.skip("no host C++ compiler")
    exe = tmp_path_factory.mktemp("route") / "route_host"
    subprocess.run([cxx, "-O2", "-std=c++17", "-include", str(HERE / "shim.h"), f"-I{hipsrc_dir()}",
                    str(HERE / "route_main.cpp"), "-o", str(exe)], check=True, capture_output=True)
    return exe


def host_route(exe: Path, cfg: MoEConfig, logits: np.ndarray, bias: np.ndarray | None = None):
    t, width = logits.shape
    score = CONSTANTS["SCORE_SOFTMAX"] if cfg.score == "softmax" else CONSTANTS["SCORE_SIGMOID"]
    head = struct.pack("<8i", t, cfg.experts, width, cfg.top_k, score, cfg.groups, cfg.topk_groups,
                       int(cfg.normalize)) + struct.pack("<fi", cfg.scaling, bias is not None)
    body = (b"" if bias is None else bias.astype(np.float32).tobytes()) + logits.astype(np.float32).tobytes()
    out = subprocess.run([str(exe)], input=head + body, capture_output=True, check=True).stdout
    n = t * cfg.top_k
    return (np.frombuffer(out[:4 * n], np.int32).reshape(t, cfg.top_k),
            np.frombuffer(out[4 * n:], np.float32).reshape(t, cfg.top_k))


def padded_logits(rng, t: int, e: int, values=None) -> np.ndarray:
    out = np.full((t, -(-e // 64) * 64 + 64), np.nan, np.float32)  # columns past E: NaN, never read
    out[:, :e] = rng.standard_normal((t, e)) * 2 if values is None else values
    return out


@pytest.mark.parametrize("name", sorted(load_models()))
def test_the_rule_matches_the_reference(route_host, name):
    cfg = load_models()[name]
    rng = np.random.default_rng([7, cfg.experts, cfg.top_k])
    bias = (rng.standard_normal(cfg.experts) * 0.05).astype(np.float32) if cfg.expert_bias else None
    logits = padded_logits(rng, 1029, cfg.experts)
    experts, weights = host_route(route_host, cfg, logits, bias)
    ref = reference.route(logits[:, :cfg.experts].astype(np.float64), cfg,
                          None if bias is None else bias.astype(np.float64))
    assert (experts == ref.experts).all()  # random fp32 logits: no near-ties at this size (seeded)
    assert np.abs(weights - ref.weights).max() < 1e-6 * max(1.0, cfg.scaling)


@pytest.mark.parametrize("score", ["softmax", "sigmoid"])
@pytest.mark.parametrize("groups", [0, 8])
def test_exact_ties_take_the_lower_index(route_host, score, groups):
    cfg = MoEConfig(experts=64, top_k=6, hidden=64, intermediate=64, score=score, groups=groups,
                    topk_groups=3 if groups else 0)
    rng = np.random.default_rng([3, groups])
    logits = padded_logits(rng, 700, 64, rng.integers(-2, 3, size=(700, 64)) * 0.5)
    experts, _ = host_route(route_host, cfg, logits)
    assert (experts == reference.route(logits[:, :64].astype(np.float64), cfg).experts).all()
