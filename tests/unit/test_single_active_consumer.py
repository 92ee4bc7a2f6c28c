"""x-single-active-consumer: one active consumer, the others idle until it goes."""

from __future__ import annotations

from .queue_fakes import FakeClock, FakeConsumer, FakeVhost, msg


def test_only_the_first_consumer_gets_messages_then_fails_over_in_order() -> None:
    q = FakeVhost(FakeClock()).queue("q", **{"x-single-active-consumer": True})
    a, b, c = FakeConsumer(), FakeConsumer(priority=5), FakeConsumer()
    for consumer in (a, b, c):
        q.add_consumer(consumer)
    assert q.consumer_count == 3 and q.all_consumers() == [a, b, c]
    q.publish(msg(b"1"))
    q.publish(msg(b"2"))
    assert a.bodies() == [b"1", b"2"] and not b.got and not c.got
    q.remove_consumer(c)  # a standby leaving changes nothing
    q.remove_consumer(a)
    q.publish(msg(b"3"))
    assert b.bodies() == [b"3"] and q.consumer_count == 1


def test_without_the_flag_consumers_share() -> None:
    q = FakeVhost(FakeClock()).queue("q")
    a, b = FakeConsumer(), FakeConsumer()
    q.add_consumer(a)
    q.add_consumer(b)
    q.publish(msg(b"1"))
    q.publish(msg(b"2"))
    assert a.bodies() == [b"1"] and b.bodies() == [b"2"]
