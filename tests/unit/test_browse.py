"""Browsing a queue (``queues/browse.py``) against the order consumers see, over the three
ready stores and a paged tail: peek returns what draining would deliver, in that order,
and changes nothing; search and position-based deletes agree with it (hypothesis)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands

from leveret.broker import queue_messages
from leveret.broker.queue_messages import Selection
from leveret.model.message import Message
from leveret.model.properties import encode_properties
from leveret.persistence.group_commit import GroupCommit
from leveret.persistence.memory import MemoryStore
from leveret.persistence.store import QueueDef
from leveret.queues import browse, plain_store
from leveret.queues.queue import Queue

# paged-ttl / paged-limit: durable featured stores, paged like the plain one; paged-priority:
# one tail per priority level.
KINDS = ("plain", "paged", "featured", "priority", "paged-ttl", "paged-limit", "paged-priority")


def _queue(kind: str) -> Queue:
    arguments: dict[str, Any] = {}
    if kind == "featured":
        arguments = {"x-max-length": 10_000}
    elif kind in ("priority", "paged-priority"):
        arguments = {"x-max-priority": 5}
    elif kind == "paged-ttl":
        arguments = {"x-message-ttl": 3_600_000}
    elif kind == "paged-limit":
        arguments = {"x-max-length": 10_000, "x-max-length-bytes": 1_000_000}
    durable = kind.startswith("paged")
    if durable:  # lazy: pages at PAGE_HIGH whatever the memory (queues/paging.py)
        arguments["x-queue-mode"] = "lazy"
    q = Queue(None, "q", durable=durable, arguments=arguments)
    if durable:
        log = GroupCommit(MemoryStore())  # no loop: every write is committed at once
        q.qid = log.put_queue(QueueDef("/", "q", True, False, {}))
        q.log = log
    return q


def _message(n: int, priority: int = 0) -> Message:
    props = commands.Basic.Properties(delivery_mode=2, priority=priority, message_id=f"id{n}",
                                      headers={"n": n})
    return Message("", "q", encode_properties(props), b"body-%d" % n)


def _drain(q: Queue) -> list[tuple[bytes, bool]]:
    out = []
    while (entry := q.take()) is not None:
        out.append((entry.message.body, entry.delivery_count > 0))
        q.settle(entry)
    return out


def _fill(q: Queue, n: int, requeue: int, priorities: list[int]) -> None:
    for i in range(n):
        q.publish(_message(i, priorities[i % len(priorities)]))
    taken = [q.take() for _ in range(min(requeue, n))]
    for entry in reversed(taken):
        assert entry is not None
        entry.delivery_count += 1
        q.requeue(entry)


@pytest.fixture(autouse=True)
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plain_store, "PAGE_HIGH", 8)
    monkeypatch.setattr(plain_store, "PAGE_BATCH", 3)
    monkeypatch.setattr(browse, "BROWSE_BATCH", 2)


scenarios = given(kind=st.sampled_from(KINDS), n=st.integers(0, 30),
                  requeue=st.integers(0, 5), offset=st.integers(0, 35),
                  count=st.integers(0, 35),
                  priorities=st.lists(st.integers(0, 7), min_size=1, max_size=4))


@scenarios
@settings(max_examples=150, deadline=None)
def test_peek_is_what_draining_delivers_and_changes_nothing(
        kind: str, n: int, requeue: int, offset: int, count: int, priorities: list[int]) -> None:
    q = _queue(kind)
    _fill(q, n, requeue, priorities)
    page = browse.peek(q, offset, count)
    again = browse.peek(q, 0, n)
    assert q.message_count == n and q.unacked == 0
    drained = _drain(q)
    assert [(b.message.body, b.redelivered) for b in again] == drained
    assert [(b.message.body, b.redelivered) for b in page] == drained[offset:offset + count]
    assert [b.position for b in page] == list(range(offset, offset + len(page)))


@scenarios
@settings(max_examples=100, deadline=None)
def test_search_and_delete_by_position_agree_with_peek(
        kind: str, n: int, requeue: int, offset: int, count: int, priorities: list[int]) -> None:
    q = _queue(kind)
    _fill(q, n, requeue, priorities)
    before = [(b.position, b.message.body) for b in browse.peek(q, 0, n)]
    wanted = before[offset % max(n, 1)] if n else None
    if wanted is not None:
        found, until = browse.search(q, browse.Criteria(message_id="id" + wanted[1][5:].decode()),
                                     5)
        assert [(b.position, b.message.body) for b in found] == [wanted] and until == n
        # A scan bounded to a window, continued from where it stopped, finds the same.
        first, stop = browse.search(q, browse.Criteria(body_contains=b"body"), 50, 0, 4)
        rest, end = browse.search(q, browse.Criteria(body_contains=b"body"), 50, stop)
        assert stop == min(4, n) and end == n
        assert [b.position for b in first + rest] == list(range(n))
    positions = tuple(sorted({offset % (n + 2), count % (n + 2)}))
    outcome = queue_messages.delete(q, Selection(positions=positions))
    gone = {p for p in positions if p < n}
    # Every position there is gets deleted, paged out or not (paged-out ones leave the tail).
    assert outcome.moved == len(gone)
    assert dict(outcome.skipped) == {p: queue_messages.NOT_FOUND for p in set(positions) - gone}
    expected = [body for p, body in before if p not in gone]
    assert [b.message.body for b in browse.peek(q, 0, n)] == expected  # before the store commits
    assert [body for body, _ in _drain(q)] == expected


def test_ids_are_read_off_the_raw_properties() -> None:
    props = commands.Basic.Properties(content_type="a", content_encoding="b", headers={"x": 1},
                                      delivery_mode=2, priority=3, correlation_id="corr",
                                      reply_to="r", expiration="10", message_id="mid")
    raw = encode_properties(props)
    assert browse.ids_of(raw) == ("corr", "mid")
    assert browse.ids_of(encode_properties(commands.Basic.Properties())) == (None, None)
    assert browse.ids_of(raw[:-2]) is None  # truncated: malformed, matches nothing


def test_a_deep_tail_is_read_one_batch_at_a_time() -> None:
    """The store is asked for at most BROWSE_BATCH entries per read, whatever the offset."""
    q = _queue("paged")
    for i in range(40):
        q.publish(_message(i))
    assert q.log is not None
    reads: list[int] = []
    real = q.log.read_queue

    def counting(qid: int, first: int, limit: int) -> Any:
        reads.append(limit)
        return real(qid, first, limit)

    q.log.read_queue = counting  # type: ignore[method-assign]
    page = browse.peek(q, 30, 3)
    assert [b.message.body for b in page] == [b"body-30", b"body-31", b"body-32"]
    assert reads and max(reads) <= browse.BROWSE_BATCH


shortstr = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20).filter(
    lambda t: len(t.encode()) <= 255)


@given(content_type=st.none() | shortstr, headers=st.none() | st.dictionaries(
           shortstr, st.integers(-5, 5) | shortstr, max_size=3),
       delivery_mode=st.none() | st.sampled_from([1, 2]), priority=st.none() | st.integers(0, 9),
       correlation_id=st.none() | shortstr, reply_to=st.none() | shortstr,
       expiration=st.none() | st.sampled_from(["0", "60000"]),
       message_id=st.none() | shortstr, app_id=st.none() | shortstr)
@settings(max_examples=300, deadline=None)
def test_ids_of_agrees_with_pamqp(**fields: Any) -> None:
    raw = encode_properties(commands.Basic.Properties(**fields))
    decoded = browse.decode_properties(raw)
    assert browse.ids_of(raw) == (decoded.correlation_id, decoded.message_id)
