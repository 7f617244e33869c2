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
