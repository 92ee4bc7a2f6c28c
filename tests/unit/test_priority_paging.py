"""Durable priority queues page their backlog, one tail per priority level.

With small page sizes a few dozen messages stand for millions: memory holds about
PAGE_HIGH ready entries, the rest are in the store, and every delivery is still the
highest priority's oldest message, whatever mix of publishes, deliveries, requeues and
restarts came before (checked against a model, hypothesis).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.persistence.store import QueueDef
from leveret.queues import plain_store
from leveret.queues.entry import QueueEntry
from leveret.queues.priority_store import PriorityStore
from leveret.queues.queue import Queue
from leveret.queues.ready import SeqIndex

from .queue_fakes import FakeClock, FakeVhost, drain, msg

PAGE_HIGH, PAGE_BATCH = 8, 3
MAX_PRIORITY = 9


@pytest.fixture(autouse=True)
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plain_store, "PAGE_HIGH", PAGE_HIGH)
    monkeypatch.setattr(plain_store, "PAGE_BATCH", PAGE_BATCH)


def _durable(vhost: FakeVhost, name: str = "q", **arguments: Any) -> Queue:
    arguments = {"x-max-priority": MAX_PRIORITY, **arguments}
    q = Queue(vhost, name, durable=True, arguments=arguments)
    q.qid = vhost.log.put_queue(QueueDef("/", name, True, False, arguments))
    q.log = vhost.log
    vhost.queues[name] = q
    return q


def _reopen(vhost: FakeVhost, q: Queue) -> Queue:
    stats = vhost.log.store.queue_stats(q.qid)
    again = Queue(vhost, q.name, durable=True, arguments=q.arguments)
    again.qid, again.log = q.qid, vhost.log
    again.recover(stats.count, stats.first_seq, stats.next_seq)
    return again


def _in_memory(q: Queue) -> int:
    return len(q.ready.returned) + len(q.ready.fresh)


def _expected(published: list[tuple[int, int]]) -> list[bytes]:
    """Bodies in RabbitMQ's priority order: highest first, then oldest."""
    return [b"%03d" % i for p, i in sorted(published, key=lambda pi: (-pi[0], pi[1]))]


def test_a_deep_priority_queue_keeps_little_in_memory_and_delivers_in_order() -> None:
    vhost = FakeVhost(FakeClock())
    q = _durable(vhost)
    published = [(i * 7 % 10, i) for i in range(100)]
    for p, i in published:
        q.publish(msg(b"%03d" % i, persistent=True, priority=p))
    assert isinstance(q.ready, PriorityStore)
    assert q.message_count == 100 and _in_memory(q) <= PAGE_HIGH
    assert q.paged_out == 100 - _in_memory(q)
    got = []
    while (entry := q.take()) is not None:
        assert _in_memory(q) <= PAGE_HIGH + PAGE_BATCH
        q.settle(entry)
        got.append(entry.message.body)
    assert got == _expected(published)


def test_a_restarted_priority_queue_rebuilds_its_levels_from_the_store() -> None:
    vhost = FakeVhost(FakeClock())
    q = _durable(vhost)
    published = [(i * 3 % 12, i) for i in range(60)]  # 10, 11 are clamped to 9
    for p, i in published:
        q.publish(msg(b"%03d" % i, persistent=True, priority=p))
    again = _reopen(vhost, q)
    assert again.message_count == 60 and _in_memory(again) <= PAGE_HIGH
    assert drain(again) == _expected([(min(p, MAX_PRIORITY), i) for p, i in published])


def test_length_limit_and_ttl_still_apply_at_depth() -> None:
    clock = FakeClock()
    vhost = FakeVhost(clock)
    q = _durable(vhost, **{"x-max-length": 30})
    for i in range(50):
        q.publish(msg(b"%03d" % i, persistent=True, priority=i % 3))
    assert q.message_count == 30 and _in_memory(q) <= PAGE_HIGH + PAGE_BATCH
    # drop-head drops the head: highest priority first, as RabbitMQ's priority queue does.
    left = sorted(((i % 3, i) for i in range(50)), key=lambda pi: (-pi[0], pi[1]))[20:]
    assert drain(q) == _expected(left)
    t = _durable(vhost, "t", **{"x-message-ttl": 1_000})
    for i in range(40):
        t.publish(msg(b"%03d" % i, persistent=True, priority=i % 4))
    clock.advance(1.001)
    assert t.message_count == 0 and drain(t) == []


def test_purge_removes_every_level_from_the_store_and_keeps_unacked() -> None:
    vhost = FakeVhost(FakeClock())
    q = _durable(vhost)
    for i in range(40):
        q.publish(msg(b"%03d" % i, persistent=True, priority=i % 5))
    held = q.take()  # a priority 4 message, older than most paged ones
    assert held is not None
    assert q.purge() == 39 and q.message_count == 0
    again = _reopen(vhost, q)
    assert [e.message.body for e in _takes(again)] == [held.message.body]  # only the unacked


def _takes(q: Queue) -> list[QueueEntry]:
    out = []
    while (entry := q.take()) is not None:
        out.append(entry)
    return out


ops = st.lists(st.one_of(
    st.tuples(st.just("publish"), st.integers(0, 12), st.integers(1, 6)),
    st.tuples(st.just("take"), st.integers(1, 8), st.just(0)),
    st.tuples(st.just("requeue"), st.integers(1, 4), st.just(0)),
    st.tuples(st.just("settle"), st.integers(1, 4), st.just(0)),
    st.tuples(st.just("restart"), st.just(0), st.just(0))), max_size=40)


@given(ops)
@settings(max_examples=200, deadline=None)
def test_any_history_delivers_what_rabbitmqs_order_says(history: list[tuple[str, int, int]]
                                                         ) -> None:
    """A model: ready (priority, seq) pairs; the next delivery is the highest priority's
    oldest. Requeued messages go back to their place; a restart makes the unacked ready."""
    vhost = FakeVhost(FakeClock())
    q = _durable(vhost)
    ready: set[tuple[int, int]] = set()
    held: list[tuple[QueueEntry, tuple[int, int]]] = []
    n = 0
    for op, a, b in history:
        if op == "publish":
            for _ in range(b):
                q.publish(msg(b"%03d" % n, persistent=True, priority=a))
                ready.add((min(a, MAX_PRIORITY), n))
                n += 1
        elif op == "take":
            for _ in range(a):
                entry = q.take()
                if not ready:
                    assert entry is None
                    break
                want = min(ready, key=lambda pi: (-pi[0], pi[1]))
                assert entry is not None and entry.message.body == b"%03d" % want[1]
                ready.discard(want)
                held.append((entry, want))
        elif op in ("requeue", "settle"):
            for _ in range(min(a, len(held))):
                entry, key = held.pop(0)
                if op == "requeue":
                    q.requeue(entry)
                    ready.add(key)
                else:
                    q.settle(entry)
        else:
            q = _reopen(vhost, q)
            ready.update(key for _, key in held)
            held = []
        assert q.message_count == len(ready)
        assert _in_memory(q) <= max(PAGE_HIGH + PAGE_BATCH, len(held) + PAGE_HIGH) + 6
    assert drain(q) == [b"%03d" % i for p, i in sorted(ready, key=lambda pi: (-pi[0], pi[1]))]


@given(st.lists(st.integers(0, 1 << 34), max_size=60), st.lists(st.integers(0, 70), max_size=5))
def test_seq_index_is_a_list_of_ascending_numbers(gaps: list[int], drops: list[int]) -> None:
    seqs, at = [], 0
    for gap in gaps:
        at += gap + 1
        seqs.append(at)
    index = SeqIndex()
    for seq in seqs:
        index.append(seq)
    for n in drops:
        index.drop(n)
        seqs = seqs[n:]
        assert list(index) == seqs and len(index) == len(seqs)
        assert index.first(3) == seqs[:3]
    if seqs:
        mid = seqs[len(seqs) // 2]
        assert index.discard(mid, mid + (1 << 33)) == [s for s in seqs if mid <= s < mid + (1 << 33)]
        assert list(index) == [s for s in seqs if not mid <= s < mid + (1 << 33)]


def test_each_levels_messages_are_clustered_in_the_store() -> None:
    """Message ids carry the level (top byte): the store keeps records in id order, so a
    level drains page by page, not one rewritten page per message."""
    from leveret.persistence.batch import CLUSTER_SHIFT

    vhost = FakeVhost(FakeClock())
    q = _durable(vhost)
    messages = [msg(b"%03d" % i, persistent=True, priority=i % 12) for i in range(40)]
    for m in messages:
        q.publish(m)
    for i, m in enumerate(messages):
        assert m.store_id >> CLUSTER_SHIFT == 255 - min(i % 12, MAX_PRIORITY)
    by_id = sorted(messages, key=lambda m: m.store_id)
    assert [m.body for m in by_id] == _expected([(min(i % 12, MAX_PRIORITY), i)
                                                 for i in range(40)])


def test_each_levels_index_entries_are_contiguous_in_the_store() -> None:
    """Sequence numbers carry the level above the queue's counter: the store's index (keyed
    by queue and sequence number) holds each level's entries together, highest first, so a
    level's acks delete neighbouring keys; next_seq counts on the counter alone."""
    vhost = FakeVhost(FakeClock())
    q = _durable(vhost)
    for i in range(30):
        q.publish(msg(b"%03d" % i, persistent=True, priority=i % 3))
    stored = vhost.log.store.read_queue(q.qid, 0, 100)
    assert [e.message.body for e in stored] == _expected([(i % 3, i) for i in range(30)])
    assert vhost.log.store.queue_stats(q.qid).next_seq == 30
    again = _reopen(vhost, q)
    again.publish(msg(b"new", persistent=True, priority=2))
    assert drain(again)[:11] == [b"%03d" % i for i in range(2, 30, 3)] + [b"new"]
