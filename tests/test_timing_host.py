"""kosmos.timing's hold size (no GPU): how many rounds of the contenders one hold queues."""
from kosmos.timing import QUEUED_ENTRIES_PER_HOLD, rounds_per_hold_for


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
