"""CTA-wide device steps (hipsrc/kosmos/cta.h cta_inclusive_scan, moe/layout.h counts_verdict,
moe/plan.h place_chunks: the MoE plan's tables, moe/route_rounds.h route_chunks: the launch's
routing step) on a CTA emulated on the host
(tests/host/fiber_cta.h: every thread a user-level context, __syncthreads and warp shuffles block
until the others arrive, the next thread to run picked at random), against serial references. A
missing barrier shows as wrong values under some seed (checked by hand: cta_inclusive_sum without
its first __syncthreads gives 550-865 wrong sums of 1,000 under seeds 1-3). Needs a host C++
compiler; without one it skips, unless KOSMOS_REQUIRE_TOOLCHAINS=1."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from host_build import build


@pytest.fixture(scope="module")
def cta_host(tmp_path_factory) -> Path:
    return build("cta_main.cpp", tmp_path_factory.mktemp("cta") / "cta_host")


@pytest.fixture(scope="module")
def cta_host_lanes8(tmp_path_factory) -> Path:
    """The same harness with eight lanes a token (the routing's KOSMOS_ROUTE_LANES knob: a round of
    one chunk, a third of the CTA idle)."""
    return build("cta_main.cpp", tmp_path_factory.mktemp("cta8") / "cta_host", defines=("KOSMOS_ROUTE_LANES=8",))


def run(exe: Path, *args: int | str) -> str:
    out = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("mismatches 0"), out
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("threads", [384, 128, 64])
@pytest.mark.parametrize("n", [0, 1, 31, 383, 384, 385, 1000, 4097])
def test_scan_is_the_serial_prefix_sum(cta_host, n, threads, seed):
    """Fewer values than threads, exactly one a thread, and several a thread (runs of
    ceil(n / threads)), under three interleavings."""
    run(cta_host, "scan", threads, n, seed)


@pytest.mark.parametrize("threads", [384, 64])
@pytest.mark.parametrize("world, e_loc, capacity, refused", [
    (1, 16, 10**6, 0), (1, 16, 100, 0),   # nobody over; the one owner over
    (8, 32, 2000, 0), (8, 32, 2000, 1),   # every owner over (the most rows wins); a refused rank
    (16, 24, 10**6, 0), (16, 24, 0, 0),   # more owners than warps at 384 threads (12 warps)
    (13, 3, 50, 1), (3, 100, 7000, 0)])   # odd sizes; owners' columns longer than a warp
def test_counts_verdict_is_the_serial_verdict(cta_host, world, e_loc, capacity, refused, threads):
    """-1 when any count is negative, else the largest owner total past capacity (0 if none), on
    every thread of the CTA."""
    for seed in (1, 2):
        run(cta_host, "verdict", threads, world, e_loc, capacity, seed, refused)


@pytest.mark.parametrize("grid, tokens, experts, k, skew", [
    (7, 1000, 128, 8, 0),      # several chunks a CTA
    (132, 4096, 16, 8, 0),     # the EP-8 share of Qwen3-30B: a chunk a CTA or none
    (5, 37, 384, 8, 0),        # E = the block's threads (Kimi K2)
    (3, 300, 512, 4, 0),       # E past the block's threads
    (132, 100, 64, 6, 1),      # every token to experts 0..5; most CTAs place nothing
    (1, 1, 8, 2, 0), (4, 0, 32, 4, 0)])  # one token; none
def test_place_chunks_is_the_stable_counting_sort(cta_host, grid, tokens, experts, k, skew):
    """order, slot and start of every CTA's placement (each CTA its run of chunks, on its own
    emulated CTA) equal the stable counting sort by expert, then token, then j; the totals handed
    to the early count publish (totals_known) are the final start[]."""
    for seed in (1, 2):
        run(cta_host, "place", 384, grid, tokens, experts, k, seed, skew)


SOFTMAX, SIGMOID = 0, 1


@pytest.mark.parametrize("lendable", [0, -1, -2, 1 << 20])
@pytest.mark.parametrize("grid, tokens, experts, k, score, groups, topk_groups, bias, losses", [
    (32, 4096, 128, 8, SOFTMAX, 0, 0, 0, 1),    # Qwen3-30B's router at EP 8's tokens: two rounds a CTA
    (7, 1000, 128, 8, SOFTMAX, 0, 0, 0, 1),     # several rounds a CTA, a partial last chunk
    (5, 700, 256, 8, SIGMOID, 8, 4, 1, 1),      # DeepSeek-V3: groups, a bias in the choice
    (3, 300, 384, 8, SIGMOID, 1, 1, 1, 0),      # Kimi K2's E (the block's threads), no losses
    (2, 100, 512, 8, SOFTMAX, 0, 0, 1, 1),      # E past the block's threads, a bias
    (40, 200, 64, 4, SIGMOID, 8, 2, 1, 1),      # a bias staged by CTAs that route nothing (7 chunks)
    (4, 333, 64, 16, SOFTMAX, 0, 0, 0, 1),      # k past eight: sixteen top slots
    (33, 37, 8, 2, SOFTMAX, 0, 0, 0, 1),        # two chunks and 31 idle CTAs; E below a warp
    (3, 90, 6, 2, SOFTMAX, 0, 0, 1, 1),         # E not a multiple of 4
    (2, 1, 32, 4, SIGMOID, 4, 2, 0, 1), (3, 0, 16, 4, SOFTMAX, 0, 0, 0, 1)])  # one token; none
def test_route_chunks_is_route_token_and_the_chunk_sums(cta_host, grid, tokens, experts, k, score, groups,
                                                        topk_groups, bias, losses, lendable):
    """Every token's experts and weights as route_token's (one thread a token), the chunks' counts,
    prob sums and logsumexp^2 sums as the standalone count kernel's, bit for bit, whether the
    round's rows are staged in the lent stages (-1: exactly their bytes; 1 MiB) or read from
    global memory (0; -2: a byte short), with normal logits and with ties (8 distinct values), row
    strides of E + 3 (seed 1) and a multiple of 4 floats (seed 2: what notes/patches/
    route_stage_16byte.patch's 16-byte staging loads need)."""
    for ties, seed in ((0, 1), (1, 2)):
        run(cta_host, "route", grid, tokens, experts, k, score, groups, topk_groups, bias, losses, lendable, ties, seed)


@pytest.mark.parametrize("lendable", [0, -1])
@pytest.mark.parametrize("grid, tokens, experts, k, score, groups, topk_groups, bias, losses", [
    (32, 4096, 128, 8, SOFTMAX, 0, 0, 0, 1), (5, 700, 256, 8, SIGMOID, 8, 4, 1, 1),
    (4, 333, 64, 16, SOFTMAX, 0, 0, 0, 1)])
def test_route_chunks_on_eight_lanes_is_route_token(cta_host_lanes8, grid, tokens, experts, k, score, groups,
                                                     topk_groups, bias, losses, lendable):
    """As above with KOSMOS_ROUTE_LANES=8 (the knob the phase traces compare)."""
    for ties, seed in ((0, 1), (1, 2)):
        run(cta_host_lanes8, "route", grid, tokens, experts, k, score, groups, topk_groups, bias, losses, lendable,
            ties, seed)
