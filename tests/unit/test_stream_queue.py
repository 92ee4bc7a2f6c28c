"""A stream queue in process: the group commit over the memory store written synchronously,
fake consumers, a fake clock. How many store reads consumers cost, credit, retention."""

from __future__ import annotations

from typing import Any

import pytest

from leveret.model.errors import ConnectionError_
from leveret.persistence.store import QueueDef
from leveret.queues.stream import Stream
from leveret.queues.stream_cache import PAGE

from .queue_fakes import FakeClock, FakeConsumer, FakeVhost, msg


class CountingReads:
    """Wraps the store's ``read_queue`` to count calls and entries read."""

    def __init__(self, vhost: FakeVhost) -> None:
        self.calls = 0
        self.entries = 0
        store = vhost.log.store
        read = store.read_queue

        def counted(qid: int, from_seq: int, limit: int) -> Any:
            out = read(qid, from_seq, limit)
            self.calls += 1
            self.entries += len(out)
            return out

        store.read_queue = counted  # type: ignore[method-assign]


def stream(vhost: FakeVhost, name: str = "s", **arguments: Any) -> Stream:
    arguments = {"x-queue-type": "stream", **arguments}
    s = Stream(vhost, name, durable=True, arguments=arguments)
    vhost.queues[name] = s
    s.qid = vhost.log.put_queue(QueueDef("/", name, arguments=arguments))
    s.log = vhost.log
    return s


def consumer(prefetch: int, offset: Any = "first") -> Any:
    c = FakeConsumer(prefetch)
    c.tag = f"c{id(c)}"
    c.arguments = {"x-stream-offset": offset}
    return c


def settle_all(s: Stream, c: Any) -> None:
    """Ack, one by one, what ``c`` holds (the channel gives the credit back first)."""
    held = c.got[len(c.got) - c.unacked:]
    for entry in held:
        c.unacked -= 1
        s.settle(entry)


def test_consumers_at_the_same_offsets_share_one_read_of_each_page() -> None:
    vhost = FakeVhost(FakeClock())
    s = stream(vhost)
    for i in range(1_000):
        s.publish(msg(b"%d" % i))
    reads = CountingReads(vhost)
    consumers = [consumer(100) for _ in range(10)]
    for c in consumers:
        s.add_consumer(c)
    while any(c.unacked for c in consumers):
        for c in consumers:
            settle_all(s, c)
    assert all([e.seq for e in c.got] == list(range(1_000)) for c in consumers)
    assert reads.entries == 1_000  # every entry read once for all ten
    assert reads.calls == -(-1_000 // PAGE)
    assert all(c.got[7].message is consumers[0].got[7].message for c in consumers)
    headers = consumers[3].got[999].message.headers
    assert headers == {"x-stream-offset": 999}
    assert s.message_count == 1_000 and s.unacked == 0


def test_consumers_far_apart_read_their_own_pages_within_the_byte_bound() -> None:
    vhost = FakeVhost(FakeClock())
    s = stream(vhost)
    # About four pages of 100-byte bodies with their properties and encoded frames.
    s._pages.max_bytes = 4 * PAGE * 300
    for i in range(2_000):
        s.publish(msg(b"%099d" % i))
    reads = CountingReads(vhost)
    consumers = [consumer(50, offset) for offset in (0, 700, 1_400)]
    for c in consumers:
        s.add_consumer(c)
    while any(c.unacked for c in consumers):
        for c in consumers:
            settle_all(s, c)
            assert s._pages.bytes <= s._pages.max_bytes + PAGE * 600
    assert [len(c.got) for c in consumers] == [2_000, 1_300, 600]
    assert [e.seq for e in consumers[1].got] == list(range(700, 2_000))
    assert reads.entries < 2 * (2_000 + 1_300 + 600)  # no page read over and over


def test_consumers_at_the_tail_read_each_commit_once_between_them() -> None:
    vhost = FakeVhost(FakeClock())
    s = stream(vhost)
    consumers = [consumer(10, "next") for _ in range(5)]
    for c in consumers:
        s.add_consumer(c)
    reads = CountingReads(vhost)
    for i in range(300):  # one commit batch each (the fake store commits synchronously)
        s.publish(msg(b"%d" % i))
        for c in consumers:
            settle_all(s, c)
    assert all([e.seq for e in c.got] == list(range(300)) for c in consumers)
    assert reads.entries == 300 and reads.calls == 300


def test_credit_is_the_prefetch_and_nothing_is_redelivered() -> None:
    vhost = FakeVhost(FakeClock())
    s = stream(vhost)
    for i in range(5):
        s.publish(msg(b"%d" % i))
    c = consumer(2)
    s.add_consumer(c)
    assert [e.seq for e in c.got] == [0, 1]
    c.unacked -= 1
    s.requeue(c.got[0])  # a nack with requeue: credit back, no redelivery
    s.deliver_ready()
    assert [e.seq for e in c.got] == [0, 1, 2]
    c.unacked -= 1
    s.reject(c.got[1])
    assert [e.seq for e in c.got] == [0, 1, 2, 3]
    with pytest.raises(ConnectionError_):
        s.take()
    with pytest.raises(ConnectionError_):
        s.purge()


def test_pages_shared_before_retention_are_not_served_after_it() -> None:
    clock = FakeClock()
    vhost = FakeVhost(clock)
    s = stream(vhost, **{"x-max-age": "10s", "x-stream-max-segment-size-bytes": 1})
    for i in range(3):
        s.publish(msg(b"old%d" % i))
    early = consumer(1)
    s.add_consumer(early)  # reads, and so shares, the page holding offsets 0..2
    assert [e.message.body for e in early.got] == [b"old0"]
    clock.advance(11)
    s.publish(msg(b"new"))  # retention drops offsets 0..2
    settle_all(s, early)  # the reader behind the log's start goes on at its first offset
    assert [e.seq for e in early.got] == [0, 3]


def test_age_retention_drops_old_segments_when_one_opens() -> None:
    clock = FakeClock()
    vhost = FakeVhost(clock)
    s = stream(vhost, **{"x-max-age": "10s", "x-stream-max-segment-size-bytes": 1})
    for i in range(3):
        s.publish(msg(b"old%d" % i))  # one segment each (1-byte segments)
    assert (s.first_offset, s.message_count) == (0, 3)
    clock.advance(11)
    s.publish(msg(b"new"))
    assert (s.first_offset, s.message_count) == (3, 1)
    c = consumer(10)
    s.add_consumer(c)
    assert [e.message.body for e in c.got] == [b"new"]
