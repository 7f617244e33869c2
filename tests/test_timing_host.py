"""kosmos.timing's host side (no GPU): how many rounds of the contenders one hold queues, and the
order of each round."""
from kosmos.timing import QUEUED_ENTRIES_PER_HOLD, round_order, rounds_per_hold_for


def test_default_keeps_the_queue_bounded():
    # bench/gemm.py's ten contenders at 30 repetitions: 300 calls a hold overflowed the H100's queue
    per = rounds_per_hold_for(10, 30)
    assert per * 10 * 3 <= QUEUED_ENTRIES_PER_HOLD
    assert per == QUEUED_ENTRIES_PER_HOLD // 30


def test_few_contenders_hold_all_their_rounds():
    assert rounds_per_hold_for(1, 30) == 30
    assert rounds_per_hold_for(2, 20) == 20


def test_given_value_is_kept_within_one_and_iters():
    assert rounds_per_hold_for(10, 30, 4) == 4
    assert rounds_per_hold_for(10, 3, 4) == 3
    assert rounds_per_hold_for(10, 30, 0) == 1
    assert rounds_per_hold_for(500, 30) == 1  # more contenders than one hold's entries: one round
    assert rounds_per_hold_for(10, 30, entries_per_call=20) == QUEUED_ENTRIES_PER_HOLD // 200


def test_each_contender_follows_every_other_over_the_rounds():
    names = ["cublas", "ours", "w256", "w192", "w128", "sk"]
    rounds = [round_order(names, i) for i in range(30)]
    assert all(sorted(r) == sorted(names) for r in rounds)  # every contender once a round
    assert rounds == [round_order(names, i) for i in range(30)]  # the same on every rank
    calls = [n for r in rounds for n in r]  # the stream's order, rounds back to back
    predecessors = {n: {p for p, c in zip(calls, calls[1:]) if c == n} for n in names}
    assert all(predecessors[n] >= set(names) - {n} for n in names)
    assert round_order([], 3) == [] and round_order(["one"], 5) == ["one"]
