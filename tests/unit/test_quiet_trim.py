"""Memory is given back once per quiet spell: counters unchanged for a while, fed a fake clock."""

from __future__ import annotations

from leveret.node.quiet_trim import QuietTrim


def test_a_fresh_broker_has_nothing_to_give_back() -> None:
    quiet = QuietTrim(quiet_after=10)
    assert not any(quiet.due(0, t) for t in range(0, 60))


def test_one_release_after_the_burst_and_none_until_messages_move_again() -> None:
    quiet = QuietTrim(quiet_after=10)
    assert not quiet.due(0, 0)
    for t in range(1, 20):  # a burst: the counters move every tick
        assert not quiet.due(t * 1000, t)
    assert not quiet.due(19_000, 28.5)  # 9.5 s quiet: a pause, not yet quiet
    assert quiet.due(19_000, 29)
    assert not any(quiet.due(19_000, t) for t in range(30, 100))  # once per quiet spell
    assert not quiet.due(19_001, 100)  # one message: a new spell begins
    assert not quiet.due(19_001, 109)
    assert quiet.due(19_001, 110)
