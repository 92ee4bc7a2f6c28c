"""The source's seq <-> delivery-tag ledger, with plain values."""

from __future__ import annotations

from leveret.spark_sink.ledger import Ledger


def test_numbers_from_the_checkpoint_and_acks_below_a_seq():
    ledger: Ledger[str] = Ledger()
    ledger.catch_up(100)  # a query restarted on a checkpoint at seq 100
    seqs = [ledger.add(tag, f"m{tag}") for tag in range(1, 6)]
    assert seqs == [100, 101, 102, 103, 104]
    assert ledger.available_from(100) == 5 and ledger.available_from(103) == 2
    assert ledger.between(101, 103) == ([101, 102], ["m2", "m3"])
    assert ledger.release_below(103) == 3  # ack tag 3, multiple
    assert ledger.held == 2 and ledger.release_below(103) is None
    assert ledger.release_below(1000) == 5 and ledger.held == 0


def test_catch_up_never_goes_back_and_skip_leaves_a_gap():
    ledger: Ledger[str] = Ledger()
    ledger.catch_up(10)
    ledger.add(1, "a")
    ledger.catch_up(5)
    assert ledger.next_seq == 11
    ledger.skip_to(20)  # a replayed batch that the queue could not fill
    assert ledger.add(2, "b") == 20
    assert ledger.between(0, 100) == ([10, 20], ["a", "b"])
    assert ledger.release_below(15) == 1 and ledger.first_seq() == 20


def test_extend_numbers_a_drain_as_add_does_and_ranges_cross_gaps():
    """The drain adds its deliveries in one call: the same seqs as one add each, and the
    batch and ack ranges bisect over the gap a short replayed batch leaves."""
    by_add: Ledger[str] = Ledger()
    by_extend: Ledger[str] = Ledger()
    for ledger in (by_add, by_extend):
        ledger.catch_up(7)
    deliveries = [(tag, f"m{tag}") for tag in range(1, 5)]
    assert [by_add.add(*d) for d in deliveries][-1] == by_extend.extend(deliveries) == 10
    assert by_add.between(0, 100) == by_extend.between(0, 100) == (
        [7, 8, 9, 10], ["m1", "m2", "m3", "m4"])
    by_extend.skip_to(20)
    assert by_extend.extend([(5, "m5"), (6, "m6")]) == 21
    assert by_extend.between(9, 21) == ([9, 10, 20], ["m3", "m4", "m5"])
    assert by_extend.available_from(20) == 2 and by_extend.held == 6
    assert by_extend.release_below(15) == 4 and by_extend.first_seq() == 20
    assert by_extend.release_below(20) is None
    assert by_extend.release_below(22) == 6 and by_extend.held == 0
    assert by_extend.first_seq() is None and by_extend.between(0, 100) == ([], [])
