"""Priority queues: highest first, clamping, requeue keeps the place."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from leveret.queues.priority import effective_priority

from .queue_fakes import FakeClock, FakeConsumer, FakeVhost, drain, msg


def test_clamp() -> None:
    assert effective_priority(0, 5) == 0
    assert effective_priority(9, 5) == 5
    assert effective_priority(255, 255) == 255


def test_highest_first_fifo_within_priority() -> None:
    q = FakeVhost(FakeClock()).queue("q", **{"x-max-priority": 3})
    for body, prio in ((b"n1", None), (b"p2a", 2), (b"p9", 9), (b"p2b", 2), (b"n2", 0)):
        q.publish(msg(body, priority=prio))
    assert drain(q) == [b"p9", b"p2a", b"p2b", b"n1", b"n2"]


def test_requeue_keeps_position_within_priority() -> None:
    q = FakeVhost(FakeClock()).queue("q", **{"x-max-priority": 2})
    for body, prio in ((b"a", 1), (b"b", 1), (b"c", 2)):
        q.publish(msg(body, priority=prio))
    c_entry, a_entry = q.take(), q.take()
    q.publish(msg(b"d", priority=1))
    q.requeue(a_entry)
    q.requeue(c_entry)
    assert drain(q) == [b"c", b"a", b"b", b"d"]


def test_dispatch_order_to_a_consumer() -> None:
    q = FakeVhost(FakeClock()).queue("q", **{"x-max-priority": 10})
    for i, prio in enumerate((1, 5, 3)):
        q.publish(msg(b"%d" % i, priority=prio))
    c = FakeConsumer()
    q.add_consumer(c)
    assert c.bodies() == [b"1", b"2", b"0"]


@given(st.lists(st.one_of(st.none(), st.integers(0, 20)), max_size=40),
       st.integers(1, 10))
def test_matches_a_naive_model(priorities: list[int | None], max_priority: int) -> None:
    q = FakeVhost(FakeClock()).queue("q", **{"x-max-priority": max_priority})
    for i, prio in enumerate(priorities):
        q.publish(msg(b"%d" % i, priority=prio))
    expected = sorted(range(len(priorities)),
                      key=lambda i: (-min(priorities[i] or 0, max_priority), i))
    assert drain(q) == [b"%d" % i for i in expected]
