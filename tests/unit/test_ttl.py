"""Message TTL and x-expires with a fake clock and scheduler (no sleeping)."""

from __future__ import annotations

from leveret.model.message import parse_expiration
from leveret.queues.settings import QueueSettings
from leveret.queues.ttl import effective_ttl, expiry_of

from .queue_fakes import FakeClock, FakeConsumer, FakeVhost, drain, msg


def test_effective_ttl_is_min_of_queue_and_message() -> None:
    assert effective_ttl(QueueSettings(), -1) is None
    assert effective_ttl(QueueSettings(message_ttl=100), -1) == 100
    assert effective_ttl(QueueSettings(message_ttl=100), 50) == 50
    assert effective_ttl(QueueSettings(message_ttl=100), 500) == 100
    assert effective_ttl(QueueSettings(), 0) == 0
    assert expiry_of(QueueSettings(message_ttl=10), -1, 1000) == 1010


def test_parse_expiration_like_rabbitmq() -> None:
    assert parse_expiration("0") == 0
    assert parse_expiration("+5") == 5
    assert parse_expiration("99999999999") == 99999999999
    assert parse_expiration("abc") == "no_integer"
    assert parse_expiration(" 5") == "no_integer"
    assert parse_expiration("") == "no_integer"
    assert parse_expiration("-1") == "{value_negative,-1}"
    assert parse_expiration("5x") == '{leftover_string,"x"}'


def test_message_peeks_expiration_and_priority() -> None:
    m = msg(b"x", expiration="250", priority=7, headers={"a": 1})
    assert m.expiration == 250 and m.priority == 7 and m.has_expiration
    assert msg(b"x").expiration == -1 and not msg(b"x").has_expiration


def test_head_timer_expires_a_queue_without_consumers() -> None:
    clock = FakeClock()
    q = FakeVhost(clock).queue("q", **{"x-message-ttl": 100})
    q.publish(msg(b"a"))
    clock.advance(0.05)
    q.publish(msg(b"b"))
    assert q.message_count == 2
    clock.advance(0.06)  # a is due at 100 ms
    assert q.message_count == 1
    clock.advance(0.05)  # b at 150 ms
    assert q.message_count == 0
    assert clock.pending == 0


def test_expired_entries_behind_the_head_wait_until_they_reach_it() -> None:
    clock = FakeClock()
    q = FakeVhost(clock).queue("q")
    q.publish(msg(b"long", expiration="1000"))
    q.publish(msg(b"short", expiration="10"))
    clock.advance(0.1)
    assert q.message_count == 2  # lazily, like RabbitMQ's classic queues
    assert drain(q) == [b"long"]
    assert q.message_count == 0


def test_ttl_zero_is_delivered_only_when_a_consumer_can_take_it() -> None:
    clock = FakeClock()
    q = FakeVhost(clock).queue("q", **{"x-message-ttl": 0})
    q.publish(msg(b"nobody"))
    assert q.message_count == 0
    c = FakeConsumer(prefetch=1)
    q.add_consumer(c)
    q.publish(msg(b"taken"))
    q.publish(msg(b"no-room"))
    assert c.bodies() == [b"taken"] and q.message_count == 0


def test_requeued_entry_keeps_its_original_expiry() -> None:
    clock = FakeClock()
    q = FakeVhost(clock).queue("q", **{"x-message-ttl": 100})
    q.publish(msg(b"a"))
    entry = q.take()
    clock.advance(0.2)
    q.requeue(entry)
    assert q.message_count == 0


def test_dispatch_skips_expired_entries() -> None:
    clock = FakeClock()
    q = FakeVhost(clock).queue("q")
    c = FakeConsumer(prefetch=1)
    q.add_consumer(c)
    q.publish(msg(b"first"))
    q.publish(msg(b"live", expiration="1000"))
    q.publish(msg(b"dies", expiration="10"))
    q.publish(msg(b"last"))
    clock.advance(0.05)
    for _ in range(3):
        c.unacked -= 1  # the consumer acks its delivery
        q.settle(c.got[-1])
        q.dispatch()
    assert c.bodies() == [b"first", b"live", b"last"]


def test_queue_expires_when_unused_and_lease_is_renewed() -> None:
    clock = FakeClock()
    vhost = FakeVhost(clock)
    q = vhost.queue("q", **{"x-expires": 1000})
    clock.advance(0.6)
    q.touch()  # redeclare
    clock.advance(0.6)
    assert vhost.deleted == []
    q.take()  # basic.get renews as well
    clock.advance(0.9)
    assert vhost.deleted == []
    c = FakeConsumer()
    q.add_consumer(c)
    clock.advance(5)
    assert vhost.deleted == []  # in use
    q.remove_consumer(c)
    clock.advance(0.9)
    assert vhost.deleted == []
    clock.advance(0.2)
    assert vhost.deleted == ["q"]


def test_settings_change_applies_to_a_live_queue() -> None:
    from dataclasses import replace

    clock = FakeClock()
    vhost = FakeVhost(clock)
    q = vhost.queue("q")
    q.apply_settings(replace(q.settings, expires=500))
    clock.advance(0.6)
    assert vhost.deleted == ["q"]
