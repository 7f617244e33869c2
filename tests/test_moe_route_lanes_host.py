"""The routing rule by L lanes a token (hipsrc/kosmos/moe/route.h route_token_lanes: the MoE
forward launch's routing, kosmos/moe/router.h kRouteLanes) against its one-thread form
(route_token: the standalone kernel's, the host reference harness's), on a warp emulated on the
host (tests/host/route_lanes_main.cpp). Needs a host C++ compiler; without one it skips, unless
KOSMOS_REQUIRE_TOOLCHAINS=1."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kosmos.moe import load_models
from kosmos.moe.route import CONSTANTS

from host_build import build


@pytest.fixture(scope="module")
def route_lanes_host(tmp_path_factory) -> Path:
    return build("route_lanes_main.cpp", tmp_path_factory.mktemp("route_lanes") / "route_lanes_host")


ODD_RULES = {  # (E, k, score, groups, topk_groups, normalize, bias): shapes no model config has
    "E not a multiple of the lanes": (101, 6, "softmax", 0, 0, 0, 0),
    "groups of 20, top-3 groups": (160, 8, "softmax", 8, 3, 1, 1),
    "groups of 3": (24, 4, "sigmoid", 8, 2, 1, 1),
    "384 experts, 16 groups, top-16": (384, 16, "sigmoid", 16, 5, 1, 1),
    "top-12 (sixteen slots)": (64, 12, "softmax", 0, 0, 1, 0),
    "few experts": (8, 2, "softmax", 0, 0, 1, 0),
}


@pytest.mark.parametrize("lanes", [4, 2, 8, 32])
@pytest.mark.parametrize("ties", [0, 1, 2, 3])
@pytest.mark.parametrize("name", sorted(load_models()) + sorted(ODD_RULES))
def test_lanes_routing_is_the_thread_routing_bit_for_bit(route_lanes_host, name, ties, lanes):
    """Experts and weights bit for bit on random logits, (ties 1) on a coarse grid where equal
    scores and equal group sums occur, (ties 2) that with every third row all -inf (softmax scores
    all NaN), and (ties 3) a NaN logit in every other row and a NaN bias entry; 37 tokens (the
    last group of tokens partial: its idle lanes route the last token again and write nothing)."""
    if name in ODD_RULES:
        e, k, score, groups, topk_groups, normalize, bias = ODD_RULES[name]
    else:
        cfg = load_models()[name]
        limited = bool(cfg.groups) and cfg.topk_groups < cfg.groups
        e, k, score = cfg.experts, cfg.top_k, cfg.score
        groups, topk_groups = (cfg.groups, cfg.topk_groups) if limited else (0, 0)
        normalize, bias = int(cfg.normalize), int(cfg.expert_bias)
    args = [lanes, e, k, CONSTANTS["SCORE_SOFTMAX"] if score == "softmax" else CONSTANTS["SCORE_SIGMOID"], groups,
            topk_groups, normalize, bias, 37, 7 + ties, ties]
    out = subprocess.run([str(route_lanes_host), *map(str, args)], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("tokens 37 mismatches 0"), out
    assert int(out.split()[1]) > 0 or lanes == 1  # the lanes did exchange
