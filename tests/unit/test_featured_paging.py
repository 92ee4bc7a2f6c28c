"""Durable queues with TTL or length limits page their backlog.

With small page sizes, a few dozen messages stand for millions: memory holds at most
PAGE_HIGH ready entries, the rest is in the store (the queue's tail), and expiry, the
length and byte limits, drop-head, reject-publish and a plain queue turning featured are
still exact, across a restart of the queue from its store too.
"""

from __future__ import annotations

from typing import Any

import pytest

from leveret.exchanges import Exchange
from leveret.persistence.store import QueueDef
from leveret.queues import plain_store
from leveret.queues.entry import PublishResult
from leveret.queues.featured_store import FeaturedStore
from leveret.queues.queue import Queue

from .queue_fakes import FakeClock, FakeVhost, drain, msg

PAGE_HIGH = 8


@pytest.fixture(autouse=True)
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plain_store, "PAGE_HIGH", PAGE_HIGH)
    monkeypatch.setattr(plain_store, "PAGE_BATCH", 3)


def _durable(vhost: FakeVhost, name: str, **arguments: Any) -> Queue:
    q = Queue(vhost, name, durable=True, arguments=arguments)
    q.qid = vhost.log.put_queue(QueueDef("/", name, True, False, arguments))
    q.log = vhost.log
    vhost.queues[name] = q
    return q


def _in_memory(q: Queue) -> int:
    store = q.ready
    return len(store.fresh) + len(store.returned)


def _publish(q: Queue, n: int, start: int = 0, **kw: Any) -> None:
    for i in range(start, start + n):
        q.publish(msg(b"%03d" % i, persistent=True, **kw))


def test_a_ttl_queue_pages_and_still_expires_everything_on_time() -> None:
    clock = FakeClock()
    vhost = FakeVhost(clock)
    vhost.exchanges[""] = Exchange("", "direct", durable=True, vhost="/")
    dlq = vhost.queue("dlq")
    q = _durable(vhost, "q", **{"x-message-ttl": 10_000, "x-dead-letter-exchange": "",
                                "x-dead-letter-routing-key": "dlq"})
    _publish(q, 30)
    clock.advance(5)
    _publish(q, 20, start=30)
    assert isinstance(q.ready, FeaturedStore)
    assert q.message_count == 50 and _in_memory(q) <= PAGE_HIGH
    assert q.ready.tail.count == 50 - _in_memory(q)
    clock.advance(5.001)  # the first 30 expire, read in from the tail as the head moves
    assert q.message_count == 20 and _in_memory(q) <= PAGE_HIGH
    assert drain(dlq) == [b"%03d" % i for i in range(30)]
    clock.advance(5)
    assert q.message_count == 0 and drain(dlq) == [b"%03d" % i for i in range(30, 50)]


@pytest.mark.parametrize("arguments", [{"x-max-length": 30},
                                       {"x-max-length-bytes": 90}])  # bodies are 3 bytes
def test_drop_head_at_depth_keeps_exactly_the_newest(arguments: dict[str, Any]) -> None:
    vhost = FakeVhost(FakeClock())
    q = _durable(vhost, "q", **arguments)
    _publish(q, 50)
    assert q.message_count == 30 and _in_memory(q) <= PAGE_HIGH
    assert drain(q) == [b"%03d" % i for i in range(20, 50)]


def test_reject_publish_at_depth_counts_the_tail() -> None:
    vhost = FakeVhost(FakeClock())
    q = _durable(vhost, "q", **{"x-max-length-bytes": 60, "x-overflow": "reject-publish"})
    results = [q.publish(msg(b"%03d" % i, persistent=True)) for i in range(25)]
    assert results.count(PublishResult.REFUSED) == 5 and q.message_count == 20
    assert _in_memory(q) <= PAGE_HIGH
    assert drain(q) == [b"%03d" % i for i in range(20)]


def test_byte_limit_after_a_restart_counts_the_stored_tail() -> None:
    """A queue reopened without the tail's byte total (a store of format 2) counts them
    when the byte limit first needs them, and then drops exactly what it must."""
    vhost = FakeVhost(FakeClock())
    args = {"x-max-length-bytes": 90}
    q = _durable(vhost, "q", **args)
    _publish(q, 30)
    stats = vhost.log.store.queue_stats(q.qid)
    again = Queue(vhost, "q", durable=True, arguments=args)
    again.qid, again.log = q.qid, vhost.log
    again.recover(stats.count, stats.first_seq, stats.next_seq)
    assert again.message_count == 30 and _in_memory(again) <= PAGE_HIGH
    assert again.ready.tail.bytes is None
    _publish(again, 2, start=30)  # 96 bytes: the two oldest go
    assert again.message_count == 30
    assert drain(again) == [b"%03d" % i for i in range(2, 32)]


def test_byte_limit_after_a_restart_starts_from_the_stores_byte_total() -> None:
    """The store keeps each queue's byte total: the limit needs no read of the tail."""
    vhost = FakeVhost(FakeClock())
    args = {"x-max-length-bytes": 90}
    q = _durable(vhost, "q", **args)
    _publish(q, 30)
    stats = vhost.log.store.queue_stats(q.qid)
    assert stats.bytes == 90
    again = Queue(vhost, "q", durable=True, arguments=args)
    again.qid, again.log = q.qid, vhost.log
    again.recover(stats.count, stats.first_seq, stats.next_seq, stats.bytes)
    assert again.ready.tail.bytes == 90 - again.ready.bytes
    _publish(again, 2, start=30)  # 96 bytes: the two oldest go
    assert again.message_count == 30
    assert drain(again) == [b"%03d" % i for i in range(2, 32)]


def test_a_plain_queue_meeting_an_expiration_keeps_its_backlog_paged() -> None:
    clock = FakeClock()
    vhost = FakeVhost(clock)
    q = _durable(vhost, "q")
    _publish(q, 40)
    assert not isinstance(q.ready, FeaturedStore) and _in_memory(q) <= PAGE_HIGH
    q.publish(msg(b"exp", persistent=True, expiration="1000"))
    entry = q.take()  # reads the head; the store turns featured when it meets the expiry
    assert entry is not None
    q.requeue(entry)
    assert _in_memory(q) <= PAGE_HIGH + 1 and q.message_count == 41
    clock.advance(2)
    got = drain(q)
    assert got == [b"%03d" % i for i in range(40)]  # the expiring one is gone


def test_a_restarted_ttl_queue_does_not_count_its_tail_bytes_to_publish() -> None:
    """Without a byte limit nothing needs the tail's bytes: a publish after a restart must
    not read the whole paged-out tail from the store to count them."""
    vhost = FakeVhost(FakeClock())
    args = {"x-message-ttl": 60_000, "x-max-length": 1_000}
    q = _durable(vhost, "q", **args)
    _publish(q, 30)
    stats = vhost.log.store.queue_stats(q.qid)
    again = Queue(vhost, "q", durable=True, arguments=args)
    again.qid, again.log = q.qid, vhost.log
    again.recover(stats.count, stats.first_seq, stats.next_seq)
    _publish(again, 2, start=30)
    assert again.ready.tail.bytes is None and again.message_count == 32
