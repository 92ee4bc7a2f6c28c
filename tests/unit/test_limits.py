"""Length limits and overflow decisions."""

from __future__ import annotations

from dataclasses import replace

from leveret.exchanges import Exchange
from leveret.queues import limits
from leveret.queues.queue import PublishResult
from leveret.queues.settings import QueueSettings

from .queue_fakes import FakeClock, FakeConsumer, FakeVhost, drain, msg


def test_pure_decisions() -> None:
    s = QueueSettings(max_length=2)
    assert not limits.over_limit(s, 2, 0) and limits.over_limit(s, 3, 0)
    assert limits.drops_head(s, 3, 0) and not limits.refuses(s, 2, 0, 1)
    r = QueueSettings(max_length=2, overflow="reject-publish")
    assert limits.refuses(r, 2, 0, 1) and not limits.refuses(r, 1, 0, 1)
    assert not limits.drops_head(r, 5, 0)
    b = QueueSettings(max_length_bytes=10, overflow="reject-publish-dlx")
    assert not limits.refuses(b, 3, 6, 4) and limits.refuses(b, 3, 7, 4)
    assert limits.refuses(QueueSettings(max_length=0, overflow="reject-publish"), 0, 0, 0)


def test_drop_head_keeps_newest_and_dead_letters_maxlen() -> None:
    vhost = FakeVhost(FakeClock())
    vhost.exchanges[""] = Exchange("", "direct", durable=True, vhost="/")
    dlq = vhost.queue("dlq")
    q = vhost.queue("q", **{"x-max-length": 2, "x-dead-letter-exchange": "",
                            "x-dead-letter-routing-key": "dlq"})
    for i in range(5):
        q.publish(msg(b"%d" % i))
    assert drain(q) == [b"3", b"4"]
    assert drain(dlq) == [b"0", b"1", b"2"]


def test_bytes_limit_counts_bodies_and_follows_takes() -> None:
    q = FakeVhost(FakeClock()).queue("q", **{"x-max-length-bytes": 5})
    q.publish(msg(b"aaa"))
    q.publish(msg(b"bb"))
    q.publish(msg(b"c"))  # 6 bytes: "aaa" goes
    assert drain(q) == [b"bb", b"c"]
    q.publish(msg(b"12345"))
    assert drain(q) == [b"12345"]


def test_max_length_zero_still_delivers_to_a_waiting_consumer() -> None:
    q = FakeVhost(FakeClock()).queue("q", **{"x-max-length": 0})
    c = FakeConsumer(prefetch=1)
    q.add_consumer(c)
    q.publish(msg(b"a"))
    q.publish(msg(b"b"))
    assert c.bodies() == [b"a"] and q.message_count == 0


def test_reject_publish_refuses_regardless_of_consumers() -> None:
    q = FakeVhost(FakeClock()).queue("q", **{"x-max-length": 1, "x-overflow": "reject-publish"})
    assert q.publish(msg(b"a")) is PublishResult.ACCEPTED
    assert q.publish(msg(b"b")) is PublishResult.REFUSED
    assert drain(q) == [b"a"]


def test_requeue_over_the_limit_drops_head() -> None:
    q = FakeVhost(FakeClock()).queue("q", **{"x-max-length": 1})
    q.publish(msg(b"a"))
    entry = q.take()
    q.publish(msg(b"b"))
    q.requeue(entry)  # "a" is back in front and over the limit: the head goes
    assert drain(q) == [b"b"]


def test_lower_limit_applied_live_trims_at_once() -> None:
    q = FakeVhost(FakeClock()).queue("q")
    for i in range(5):
        q.publish(msg(b"%d" % i))
    q.apply_settings(replace(q.settings, max_length=2))
    assert q.message_count == 2
    q.apply_settings(replace(q.settings, max_length=None))
    q.publish(msg(b"5"))
    assert drain(q) == [b"3", b"4", b"5"]
