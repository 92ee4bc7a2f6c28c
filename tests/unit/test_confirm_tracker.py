"""ConfirmTracker against a naive model, as a client would read its confirms.

The model remembers, per sequence number, whether the message is held or
settled as ack/nack. Each drained confirm is applied the way a client
applies it: ``multiple=True`` covers every sequence up to the tag that the
client has not seen confirmed yet. Every covered sequence must already be
settled with the same outcome, and by the end every sequence is confirmed
exactly once.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.confirms.tracker import ConfirmTracker


class ClientView:
    def __init__(self) -> None:
        self.confirmed: dict[int, bool] = {}

    def apply(self, confirms: list[tuple[int, bool, bool]], outcome: dict[int, bool | None]) -> None:
        for tag, multiple, ok in confirms:
            if multiple:
                covered = [s for s in range(1, tag + 1) if s not in self.confirmed]
                assert covered, f"multiple confirm {tag} covers nothing new"
            else:
                assert tag not in self.confirmed, f"sequence {tag} confirmed twice"
                covered = [tag]
            for seq in covered:
                assert seq in outcome, f"confirm for unpublished sequence {seq}"
                assert outcome[seq] is not None, f"sequence {seq} confirmed while held"
                assert outcome[seq] == ok, f"sequence {seq}: expected ack={outcome[seq]}, got {ok}"
                self.confirmed[seq] = ok


def test_plain_publishes_drain_as_one_multiple_ack() -> None:
    t = ConfirmTracker()
    for _ in range(5):
        t.publish()
    assert t.unconfirmed == 5 and t.has_pending()
    assert t.drain() == [(5, True, True)]
    assert t.drain() == [] and t.unconfirmed == 0


def test_single_ack_is_not_multiple() -> None:
    t = ConfirmTracker()
    t.publish()
    assert t.drain() == [(1, False, True)]
    t.publish()
    assert t.drain() == [(2, False, True)]


def test_held_message_splits_the_multiple_ack() -> None:
    t = ConfirmTracker()
    t.publish(), t.publish(), t.publish(hold=True), t.publish(), t.publish()
    assert t.drain() == [(2, True, True), (4, False, True), (5, False, True)]
    assert not t.has_pending() and t.unconfirmed == 1
    t.settle(3, ok=False)
    assert t.drain() == [(3, False, False)]
    t.settle(3, ok=True)  # already settled: ignored
    assert t.drain() == []


def test_settle_many_releases_a_commits_list() -> None:
    t = ConfirmTracker()
    for _ in range(5):
        t.publish(hold=True)
    t.settle_many([1, 2, 4], ok=True)
    assert t.drain() == [(2, True, True), (4, False, True)]  # (tag, multiple, ack)
    t.settle_many([3, 4, 5], ok=False)  # 4 is settled already: only 3 and 5 become nacks
    assert t.drain() == [(3, False, False), (5, False, False)]
    assert t.unconfirmed == 0


def test_nacks_come_first_and_settle_all() -> None:
    t = ConfirmTracker()
    for hold in (True, False, True, True):
        t.publish(hold=hold)
    t.settle(3, ok=False)
    t.settle_all(ok=True)
    assert t.drain() == [(3, False, False), (4, True, True)]


ops = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.booleans()),
        st.tuples(st.just("settle"), st.integers(0, 200), st.booleans()),
        st.tuples(st.just("settle_all"), st.booleans()),
        st.tuples(st.just("settle_many"), st.lists(st.integers(0, 200), max_size=6),
                  st.booleans()),
        st.tuples(st.just("drain")),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(ops=ops, final_ok=st.booleans())
def test_against_model(ops: list[tuple], final_ok: bool) -> None:
    tracker = ConfirmTracker()
    outcome: dict[int, bool | None] = {}  # None while held
    view = ClientView()
    next_seq = 1
    for op in ops:
        if op[0] == "publish":
            hold = op[1]
            seq = tracker.publish(hold=hold)
            assert seq == next_seq
            next_seq += 1
            outcome[seq] = None if hold else True
        elif op[0] == "settle":
            if not outcome:
                continue
            seq = 1 + op[1] % len(outcome)
            tracker.settle(seq, op[2])
            if outcome[seq] is None:
                outcome[seq] = op[2]
        elif op[0] == "settle_many":  # a commit's list: ascending, held or settled already
            if not outcome:
                continue
            seqs = sorted({1 + n % len(outcome) for n in op[1]})
            tracker.settle_many(seqs, op[2])
            for seq in seqs:
                if outcome[seq] is None:
                    outcome[seq] = op[2]
        elif op[0] == "settle_all":
            tracker.settle_all(op[1])
            for seq, value in outcome.items():
                if value is None:
                    outcome[seq] = op[1]
        else:
            view.apply(tracker.drain(), outcome)
        held = sum(1 for v in outcome.values() if v is None)
        assert tracker.unconfirmed == len(outcome) - len(view.confirmed)
        assert tracker.has_pending() == (len(outcome) - len(view.confirmed) > held)
    tracker.settle_all(final_ok)
    for seq, value in outcome.items():
        if value is None:
            outcome[seq] = final_ok
    view.apply(tracker.drain(), outcome)
    assert view.confirmed == outcome  # every sequence exactly once, with its outcome
    assert tracker.unconfirmed == 0 and not tracker.has_pending()
    assert tracker.drain() == []
