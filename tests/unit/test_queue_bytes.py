"""The queues' byte totals for the management plane (``broker/queue_bytes.py``), checked
against a model.

Durable queues of each store flavour (plain, featured, priority), with small pages, take
persistent and transient messages of random sizes, deliver some (held unacked by a fake
channel), ack and requeue them; after every step each ``message_bytes*`` field and
``messages_persistent`` equal the sums over the messages the model says the queue holds,
and the paged-out bytes equal the bodies the tails really hold in the store (hypothesis).
A queue restarted from an LMDB store starts from the store's byte totals without reading
its tail.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.broker.queue_bytes import FIELDS, HeldBytes, byte_fields
from leveret.model.message import Message
from leveret.persistence.group_commit import GroupCommit
from leveret.persistence.lmdb_store import LmdbStore
from leveret.persistence.store import QueueDef
from leveret.queues import plain_store
from leveret.queues.entry import QueueEntry
from leveret.queues.queue import Queue
from leveret.queues.ready import Tail

from .queue_fakes import FakeClock, FakeVhost, msg

PAGE_HIGH, PAGE_BATCH = 8, 3
FLAVOURS = {"plain": {}, "featured": {"x-max-length": 1_000_000},
            "priority": {"x-max-priority": 5}}


@pytest.fixture(autouse=True)
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plain_store, "PAGE_HIGH", PAGE_HIGH)
    monkeypatch.setattr(plain_store, "PAGE_BATCH", PAGE_BATCH)


class _Channel:
    """Holds unacked deliveries as an AMQP channel does (``Channel.deliveries``)."""

    def __init__(self) -> None:
        self.held: list[tuple[QueueEntry, Queue, None]] = []
        self.passes = 0

    def deliveries(self) -> Iterator[tuple[QueueEntry, Queue, None]]:
        self.passes += 1
        return iter(self.held)


class _Connection:
    def __init__(self) -> None:
        self.channels = {1: _Channel()}


def _durable(vhost: FakeVhost, arguments: dict[str, Any], name: str = "q") -> Queue:
    q = Queue(vhost, name, durable=True, arguments=arguments)
    q.qid = vhost.log.put_queue(QueueDef("/", name, True, False, arguments))
    q.log = vhost.log
    vhost.queues[name] = q
    return q


def _tails(q: Queue) -> list[Tail]:
    store: Any = q.ready
    return list(store.tails.values()) if hasattr(store, "tails") else [store.tail]


def _stored_tail_bytes(q: Queue) -> int:
    """What the tails hold, read from the store."""
    return sum(len(e.message.body) for t in _tails(q) for e in t.walk(t.count, 100))


def _expected(live: dict[Message, bool], held: set[Message]) -> dict[str, int]:
    ready = sum(len(m.body) for m in live if m not in held)
    unacked = sum(len(m.body) for m in held)
    return {"message_bytes": ready + unacked, "message_bytes_ready": ready,
            "message_bytes_unacknowledged": unacked,
            "message_bytes_persistent": sum(len(m.body) for m, p in live.items() if p),
            "messages_persistent": sum(1 for p in live.values() if p)}


def _check(q: Queue, conn: _Connection, live: dict[Message, bool]) -> dict[str, int]:
    held = {entry.message for entry, _, _ in conn.channels[1].held}
    got = byte_fields(q, HeldBytes([conn]))
    paged_out = _stored_tail_bytes(q)
    assert got["message_bytes_paged_out"] == paged_out
    assert got["message_bytes_ram"] == got["message_bytes"] - paged_out
    assert {k: v for k, v in got.items() if k not in (
        "message_bytes_paged_out", "message_bytes_ram")} == _expected(live, held)
    return got


OPS = st.lists(st.one_of(
    st.tuples(st.just("publish"), st.integers(0, 40), st.booleans(), st.integers(0, 5)),
    st.tuples(st.just("take"), st.just(0), st.just(False), st.just(0)),
    st.tuples(st.just("ack"), st.integers(0, 50), st.just(False), st.just(0)),
    st.tuples(st.just("requeue"), st.integers(0, 50), st.just(False), st.just(0)),
), max_size=60)


@pytest.mark.parametrize("flavour", FLAVOURS)
@settings(max_examples=60, deadline=None)
@given(ops=OPS)
def test_byte_fields_match_a_model(flavour: str, ops: list[tuple[str, int, bool, int]]) -> None:
    vhost = FakeVhost(FakeClock())
    q = _durable(vhost, FLAVOURS[flavour])
    conn = _Connection()
    held = conn.channels[1].held
    live: dict[Message, bool] = {}  # message -> persistent
    for op, n, persistent, priority in ops:
        if op == "publish":
            m = msg(b"x" * n, persistent=persistent, priority=priority)
            q.publish(m)
            live[m] = persistent
        elif op == "take":
            entry = q.take()
            if entry is not None:
                held.append((entry, q, None))
        elif held:
            entry, _, _ = held.pop(n % len(held))
            if op == "ack":
                q.settle(entry)
                del live[entry.message]
            else:
                q.requeue(entry)
        _check(q, conn, live)


def test_an_empty_queue_costs_no_pass_and_a_request_one_pass() -> None:
    vhost = FakeVhost(FakeClock())
    conn = _Connection()
    channel = conn.channels[1]
    empty, q1, q2 = (_durable(vhost, {}, name) for name in ("empty", "q1", "q2"))
    for q in (q1, q2):
        for size in (3, 5):
            q.publish(msg(b"x" * size, persistent=True))
        entry = q.take()
        assert entry is not None
        channel.held.append((entry, q, None))
    held = HeldBytes([conn])
    assert byte_fields(empty, held) == {**dict.fromkeys(FIELDS, 0), "messages_persistent": 0}
    assert channel.passes == 0
    assert [byte_fields(q, held)["message_bytes_unacknowledged"] for q in (q1, q2)] == [3, 3]
    assert channel.passes == 1


def test_a_transient_queue_has_no_persistent_bytes() -> None:
    vhost = FakeVhost(FakeClock())
    q = vhost.queue("t")
    for size in range(1, 30):  # never pages: a transient queue holds everything in memory
        q.publish(msg(b"x" * size, persistent=True))
    got = byte_fields(q, HeldBytes([]))
    assert got == {"message_bytes": 435, "message_bytes_ready": 435,
                   "message_bytes_unacknowledged": 0, "message_bytes_ram": 435,
                   "message_bytes_persistent": 0, "message_bytes_paged_out": 0,
                   "messages_persistent": 0}


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_restarted_queue_starts_from_the_stores_byte_totals(
        flavour: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Transient messages (paged out ones too) and deliveries are gone after a restart;
    the persistent ones are ready, paged out, their bytes known from the store's counter
    (a plain or featured queue reads nothing of its tail to know them)."""
    vhost = FakeVhost(FakeClock())
    vhost.log = GroupCommit(LmdbStore(tmp_path / "store"))
    arguments = FLAVOURS[flavour]
    q = _durable(vhost, arguments)
    conn = _Connection()
    live: dict[Message, bool] = {}
    for i in range(20):
        m = msg(b"p" * (i + 1), persistent=True)
        q.publish(m)
        live[m] = True
    for _ in range(5):
        m = msg(b"t" * 100)  # paged out: stored, flagged transient
        q.publish(m)
        live[m] = False
    for _ in range(3):
        entry = q.take()
        assert entry is not None
        conn.channels[1].held.append((entry, q, None))
    before = _check(q, conn, live)
    assert before["message_bytes_paged_out"] > 500 and before["messages_persistent"] == 20
    vhost.log.store.close()

    vhost.log = GroupCommit(LmdbStore(tmp_path / "store"))  # drops the transient entries
    stats = vhost.log.store.queue_stats(q.qid)
    again = Queue(vhost, "q", durable=True, arguments=arguments)
    again.qid, again.log = q.qid, vhost.log
    reads: list[int] = []
    read_queue = vhost.log.read_queue
    monkeypatch.setattr(vhost.log, "read_queue",
                        lambda *a: reads.append(a[2]) or read_queue(*a))  # type: ignore[func-returns-value]
    again.recover(stats.count, stats.first_seq, stats.next_seq, stats.bytes)
    read_at_start = len(reads)
    total = sum(range(1, 21))
    after = byte_fields(again, HeldBytes([]))
    assert len(reads) == read_at_start  # the byte totals read no message
    assert after["message_bytes"] == after["message_bytes_ready"] == total
    assert after["message_bytes_persistent"] == total and after["messages_persistent"] == 20
    assert after["message_bytes_paged_out"] + after["message_bytes_ram"] == total
    if flavour == "plain":  # startup read nothing: everything is in the tail
        assert reads == [] and after["message_bytes_paged_out"] == total
    for _ in range(4):  # reads part of the tail back
        entry = again.take()
        assert entry is not None
        again.settle(entry)
    live = {m: True for m in live if live[m]}
    gone = {bytes(m.body) for m in list(live)[:4]}
    live = {m: p for m, p in live.items() if bytes(m.body) not in gone}
    _check(again, _Connection(), live)
    vhost.log.store.close()
