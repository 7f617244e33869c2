"""Host logic of the collectives: the all-to-all layout every rank derives from the count matrix."""
from __future__ import annotations

import numpy as np
import pytest

from kosmos.collectives import all_to_all_layout


@pytest.mark.parametrize("world", [1, 2, 3, 5, 8])
def test_all_to_all_layout_places_every_row_once(world):
    rng = np.random.default_rng(world)
    counts = rng.integers(0, 7, (world, world))
    counts[0, :] = 0  # a rank that sends nothing
    # Simulate the push: source s writes its rows for d at d's arena rows [first, first + n).
    arenas = {d: np.full(int(counts[:, d].sum()), -1) for d in range(world)}
    for s in range(world):
        plan, _ = all_to_all_layout(counts, s)
        send, send_first, arena_first = plan[:world], plan[world:2 * world], plan[2 * world:]
        np.testing.assert_array_equal(send, counts[s])
        assert list(send_first) == [int(counts[s, :d].sum()) for d in range(world)]  # x is destination-major
        for d in range(world):
            rows = arenas[d][arena_first[d]:arena_first[d] + send[d]]
            assert (rows == -1).all()  # nobody wrote there before
            rows[:] = s
    for d in range(world):
        _, recv = all_to_all_layout(counts, d)
        assert recv == counts[:, d].sum()
        # Every row arrived, grouped by source in rank order.
        expected = np.concatenate([np.full(counts[s, d], s) for s in range(world)]) if recv else np.empty(0)
        np.testing.assert_array_equal(arenas[d], expected)


# ---- the functional forms check `out` on every rank (CAI stand-ins: no GPU, no driver) ----

PTR = 0x7F00_0000_0000  # 16-byte aligned, never read


@pytest.fixture
def no_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    from kosmos import arrays

    monkeypatch.setattr(arrays, "_pointer_device", lambda ptr, name: 0)
    monkeypatch.setattr(arrays, "_consumer_stream", lambda stream: None)
    monkeypatch.setattr(arrays, "_wait_for_producer", lambda producer, consumer: None)


@pytest.mark.parametrize("fn", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("bad", ["shape", "dtype", "overlap", "host"])
def test_a_bad_out_on_one_rank_is_told_to_every_rank(no_driver, fn, bad) -> None:
    """The refusal crosses the communicator (it used to come from the plan's call on this rank alone,
    after its peers had launched), before any plan is built."""
    pytest.importorskip("cupy")
    from fakes import FakeComm
    from producers import CAIProducer

    from kosmos import World, collectives

    sent = []
    world = World(FakeComm(0, 2, peers=lambda v: sent.append(v) or [v, v]), gpu=False)
    x = CAIProducer(PTR, (4, 8), "<f4")
    rows = 8 if fn == "all_gather" else 2
    out = {"shape": CAIProducer(PTR + 4096, (rows + 1, 8), "<f4"),
           "dtype": CAIProducer(PTR + 4096, (rows, 8), "<i4"),
           "overlap": CAIProducer(PTR + 64, (rows, 8), "<f4"),
           "host": np.zeros((rows, 8), np.float32)}[bad]
    with pytest.raises((TypeError, ValueError), match="out"):
        getattr(collectives, fn)(world, x, out)
    assert any(isinstance(v, str) and "out" in v for v in sent)  # the peers were told why
    assert not getattr(world, "_collective_plans", None)


def test_a_peers_bad_out_stops_this_rank_too(no_driver) -> None:
    pytest.importorskip("cupy")
    from fakes import FakeComm
    from producers import CAIProducer

    from kosmos import World, collectives
    from kosmos.errors import KosmosError

    peer = "ValueError: out has shape (3, 8); reduce_scatter writes (2, 8)"
    world = World(FakeComm(0, 2, peers=lambda v: [v, peer] if v is None else [v, v]), gpu=False)
    with pytest.raises(KosmosError, match=r"another rank rejected its input: rank 1: ValueError: out has shape"):
        collectives.reduce_scatter(world, CAIProducer(PTR, (4, 8), "<f4"), CAIProducer(PTR + 4096, (2, 8), "<f4"))


def test_all_to_all_reuses_the_smallest_plan_that_fits(no_driver, monkeypatch) -> None:
    """A call takes the smallest cached plan whose arena holds it; a new bucket only when none does,
    after closing the smaller plans (a growing capacity used to keep one heap per bucket alive). Both
    simulated ranks, sending different counts, build and close the same plans (their choice depends
    on the all-gathered matrix and on plans built collectively)."""
    pytest.importorskip("cupy")
    from fakes import FakeComm
    from producers import CAIProducer

    from kosmos import World, collectives

    class Plan:
        stale = False

        def __init__(self, world, capacity, row_shape, dtype):
            self.world, self.capacity = world, capacity
            world.log.append(("build", capacity))

        def close(self):
            self.world.log.append(("close", self.capacity))

        def _push(self, x, matrix):
            return self.capacity

    monkeypatch.setattr(collectives, "AllToAll", Plan)
    sends = {}  # this call's send counts per rank: rows[r] -> [to rank 0, to rank 1]

    def rank(r):
        world = World(FakeComm(r, 2, peers=lambda v: [sends[0], sends[1]] if isinstance(v, np.ndarray) else [v, v]),
                      gpu=False)
        world.log = []
        return world

    worlds = [rank(0), rank(1)]

    def call(rank0, rank1):
        sends.update({0: np.array(rank0), 1: np.array(rank1)})
        return [collectives.all_to_all(w, CAIProducer(PTR, (sum(sends[w.rank]), 8), "<f4"), sends[w.rank])
                for w in worlds]

    assert call([50, 10], [40, 0]) == [1024, 1024]        # rank 0 receives 90 rows, rank 1 10
    assert call([1500, 0], [600, 5]) == [4096, 4096]      # 2100 rows: no plan fits, the smaller one goes
    assert call([5, 5], [5, 5]) == [4096, 4096]           # no new 1024 bucket beside the 4096 one
    assert call([2048, 0], [2048, 0]) == [4096, 4096]
    assert call([4097, 0], [1, 0]) == [8192, 8192]
    assert worlds[0].log == worlds[1].log == [("build", 1024), ("close", 1024), ("build", 4096),  # freed first
                                              ("close", 4096), ("build", 8192)]
    # Of several plans that fit, the smallest (e.g. buckets built before this rule).
    cache = worlds[0]._collective_plans
    cache[("a2a", (8,), np.dtype(np.float32), 2048)] = Plan(worlds[0], 2048, (8,), np.float32)
    sends.update({0: np.array([100, 0]), 1: np.array([1, 0])})
    assert collectives.all_to_all(worlds[0], CAIProducer(PTR, (100, 8), "<f4"), [100, 0]) == 2048
