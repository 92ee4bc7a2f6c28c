"""Browse a queue's ready messages without changing anything: peek and search.

Theory of operation
-------------------
RabbitMQ can only show a queue's messages by delivering and requeueing them,
which sets ``redelivered`` and may reorder them. Browsing here walks the ready
store in delivery order and touches nothing: no delivery count, no requeue,
no expiry, no store write.

Delivery order is the stores' (``ready.py``): the requeued entries first (a
heap, walked in heap order: sequence, or priority then sequence), then the
fresh deque, then the paged-out ``Tail`` of a durable queue, read from the
disk store ``BROWSE_BATCH`` entries at a time and dropped after use, so memory
stays bounded however deep the queue and wherever the page starts. The tail's
entries not committed yet are not visible to reads: a browse shows the
committed part of the tail only (as a consumer would see it a moment later).

Work is bounded per request: ``walk`` stops after ``visit`` entries, so a
search scans at most ``SEARCH_SCAN_LIMIT`` messages and a peek at offset
``o`` reads ``o + count`` entries (skipping into a deep tail reads through
it, batch by batch, but never holds more than one batch).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any, Protocol

from leveret.queues.ready import Tail

if TYPE_CHECKING:
    from leveret.model.message import Message
    from leveret.queues.entry import QueueEntry
    from leveret.queues.host import QueueLog

# Stored entries read from the disk store at once while walking a paged tail.
BROWSE_BATCH = 500
# Ready messages one search request looks at, at most (a search is one synchronous walk).
SEARCH_SCAN_LIMIT = 100_000
# Messages one peek or search returns, at most (a page of the console).
MAX_PAGE = 1_000


class Item(Protocol):
    """A ready entry as browsing sees it: in memory (``QueueEntry``) or stored."""

    @property
    def seq(self) -> int: ...

    @property
    def message(self) -> Message: ...

    @property
    def delivery_count(self) -> int: ...


class Browsable(Protocol):
    """The parts of a ready store (plain, featured, priority) a walk reads."""

    returned: list[QueueEntry]
    fresh: deque[QueueEntry]
    tail: Tail


class Walked(Protocol):
    """The queue as a walk needs it."""

    log: QueueLog | None
    qid: int

    @property
    def ready(self) -> Browsable: ...


@dataclass(frozen=True)
class Browsed:
    """One ready message at its position (0 = the next to be delivered)."""

    position: int
    message: Message
    redelivered: bool


def walk(queue: Walked, visit: int) -> Iterator[Item]:
    """The first ``visit`` ready entries in delivery order (see the module docstring)."""
    if visit <= 0:
        return
    store = queue.ready
    returned = store.returned
    if returned:
        if len(returned) > visit:
            yield from heapq.nsmallest(visit, returned)
            return
        yield from sorted(returned)
        visit -= len(returned)
    fresh = store.fresh
    if fresh:
        yield from islice(fresh, visit)
        visit -= min(visit, len(fresh))
    tail = store.tail
    log = queue.log
    if not visit or not tail.count or log is None:
        return
    first, left = tail.first, min(tail.count, visit)
    while left > 0:
        batch = log.read_queue(queue.qid, first, min(BROWSE_BATCH, left))
        if not batch:
            return  # the rest is not committed yet
        yield from batch
        first = batch[-1].seq + 1
        left -= len(batch)


def peek(queue: Walked, offset: int, count: int) -> list[Browsed]:
    """``count`` ready messages from position ``offset`` on, in delivery order."""
    offset, count = max(offset, 0), min(max(count, 0), MAX_PAGE)
    items = islice(walk(queue, offset + count), offset, None)
    return [Browsed(offset + i, item.message, item.delivery_count > 0)
            for i, item in enumerate(items)]


@dataclass(frozen=True)
class Criteria:
    """What a search matches: every given criterion must hold (None = any)."""

    message_id: str | None = None
    correlation_id: str | None = None
    header: tuple[str, Any] | None = None
    body_contains: bytes | None = None

    def matches(self, message: Message) -> bool:
        body = self.body_contains
        if body is not None and body not in message.body:
            return False
        if self.message_id is None and self.correlation_id is None and self.header is None:
            return True
        try:
            props = message.properties
        except ValueError:
            return False  # a malformed property list matches no property criterion
        if self.message_id is not None and props.message_id != self.message_id:
            return False
        if self.correlation_id is not None and props.correlation_id != self.correlation_id:
            return False
        if self.header is not None:
            name, value = self.header
            headers = props.headers or {}
            if name not in headers or _text(headers[name]) != _text(value):
                return False
        return True


def _text(value: Any) -> Any:
    """Header values compare as the JSON a user typed: AMQP long strings arrive as bytes."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def search(queue: Walked, criteria: Criteria, limit: int,
           scan: int = SEARCH_SCAN_LIMIT) -> list[Browsed]:
    """Up to ``limit`` matching ready messages among the first ``scan``, in delivery order."""
    limit = min(max(limit, 0), MAX_PAGE)
    found: list[Browsed] = []
    if not limit:
        return found
    for position, item in enumerate(walk(queue, scan)):
        if criteria.matches(item.message):
            found.append(Browsed(position, item.message, item.delivery_count > 0))
            if len(found) >= limit:
                break
    return found
