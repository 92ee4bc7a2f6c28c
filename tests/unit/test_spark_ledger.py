"""The source's seq <-> delivery-tag ledger, with plain values."""

from __future__ import annotations

from leveret.spark_sink.ledger import Ledger


def test_numbers_from_the_checkpoint_and_acks_below_a_seq():
    ledger: Ledger[str] = Ledger()
    ledger.catch_up(100)  # a query restarted on a checkpoint at seq 100
    seqs = [ledger.add(tag, f"m{tag}") for tag in range(1, 6)]
    assert seqs == [100, 101, 102, 103, 104]
    assert ledger.available_from(100) == 5 and ledger.available_from(103) == 2
    assert ledger.between(101, 103) == [(101, "m2"), (102, "m3")]
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
    assert ledger.between(0, 100) == [(10, "a"), (20, "b")]
    assert ledger.release_below(15) == 1 and ledger.first_seq() == 20
