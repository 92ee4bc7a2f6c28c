"""Browse a queue's ready messages without changing anything: peek and search.

Theory of operation
-------------------
RabbitMQ can only show a queue's messages by delivering and requeueing them,
which sets ``redelivered`` and may reorder them. Browsing here walks the ready
store in delivery order and touches nothing: no delivery count, no requeue,
no expiry, no store write.

Delivery order is the stores' (``ready.py``, ``ReadyStore.segments``): the
requeued entries first (a heap, walked in heap order), then the fresh deque,
then the paged-out ``Tail`` of a durable queue; a priority queue gives each
priority level's entries in memory, then that level's tail. Tails are read from
the disk store ``BROWSE_BATCH`` entries at a time and dropped after use, so memory
stays bounded however deep the queue and wherever the page starts. The tail's
entries not committed yet are not visible to reads: a browse shows the
committed part of the tail only (as a consumer would see it a moment later).

Work is bounded per request: ``walk`` stops after ``visit`` entries, so a
search scans at most ``SEARCH_SCAN_LIMIT`` messages (``HEADER_SCAN_LIMIT``
when a header must be decoded) and says where it stopped, for the next
request to continue from there; a peek at offset
``o`` reads ``o + count`` entries (skipping into a deep tail reads through
it, batch by batch, but never holds more than one batch).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any, Protocol

from leveret.model.properties import decode_properties
from leveret.queues.ready import Tail

if TYPE_CHECKING:
    from leveret.model.message import Message
    from leveret.queues.entry import QueueEntry
    from leveret.queues.host import QueueLog

# Stored entries read from the disk store at once while walking a paged tail.
BROWSE_BATCH = 500
# Ready messages one search request looks at, at most: a search is one synchronous walk on
# the event loop, so this bounds how long it holds the broker (measured on this machine:
# about 3 us a message for ids and body, 22 us when headers must be decoded).
SEARCH_SCAN_LIMIT = 20_000
HEADER_SCAN_LIMIT = 5_000
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
    """The part of a ready store (plain, featured, priority) a walk reads."""

    def segments(self, visit: int) -> Iterator[QueueEntry | Tail]: ...


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
    for part in queue.ready.segments(visit):
        if visit <= 0:
            return
        if isinstance(part, Tail):
            for item in part.walk(visit, BROWSE_BATCH):
                yield item
                visit -= 1
        else:
            yield part
            visit -= 1


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
        raw = message.raw_properties
        if self.message_id is not None or self.correlation_id is not None:
            ids = ids_of(raw)
            if ids is None:
                return False  # malformed properties match no property criterion
            correlation_id, message_id = ids
            if self.message_id is not None and message_id != self.message_id:
                return False
            if self.correlation_id is not None and correlation_id != self.correlation_id:
                return False
        if self.header is not None:
            # Decoded here, not through ``message.properties``: that would keep the decoded
            # properties of every message searched (browsing changes nothing, memory neither).
            try:
                headers = decode_properties(raw).headers or {}
            except ValueError:
                return False
            name, value = self.header
            if name not in headers or _text(headers[name]) != _text(value):
                return False
        return True


_u32 = struct.Struct(">I")
# Property flags (AMQP 0-9-1 basic class, wire order) before message-id.
_SHORTSTR_BEFORE = (1 << 15, 1 << 14)  # content-type, content-encoding
_HEADERS, _MODE, _PRIORITY = 1 << 13, 1 << 12, 1 << 11
_CORRELATION_ID, _REPLY_TO, _EXPIRATION, _MESSAGE_ID = 1 << 10, 1 << 9, 1 << 8, 1 << 7


def ids_of(raw: bytes) -> tuple[str | None, str | None] | None:
    """(correlation-id, message-id) read off the raw property list without decoding the
    rest (a search looks at every message); None when malformed."""
    try:
        flags = int.from_bytes(raw[:2], "big")
        pos = 2
        if flags & 1:  # continuation flag words (never used by 0-9-1 basic): skip them
            while int.from_bytes(raw[pos - 2:pos], "big") & 1:
                pos += 2
        for bit in _SHORTSTR_BEFORE:
            if flags & bit:
                pos += 1 + raw[pos]
        if flags & _HEADERS:
            pos += 4 + _u32.unpack_from(raw, pos)[0]
        pos += bool(flags & _MODE) + bool(flags & _PRIORITY)
        correlation_id = message_id = None
        if flags & _CORRELATION_ID:
            correlation_id = raw[pos + 1:pos + 1 + raw[pos]].decode("utf-8", "replace")
            pos += 1 + raw[pos]
        for bit in (_REPLY_TO, _EXPIRATION):
            if flags & bit:
                pos += 1 + raw[pos]
        if flags & _MESSAGE_ID:
            end = pos + 1 + raw[pos]
            if end > len(raw):
                return None
            message_id = raw[pos + 1:end].decode("utf-8", "replace")
        return correlation_id, message_id
    except (IndexError, struct.error):
        return None


def _text(value: Any) -> Any:
    """Header values compare as the JSON a user typed: AMQP long strings arrive as bytes."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def search(queue: Walked, criteria: Criteria, limit: int, offset: int = 0,
           scan: int | None = None) -> tuple[list[Browsed], int]:
    """Up to ``limit`` matching ready messages in delivery order, looking at most at ``scan``
    messages from position ``offset`` on; and the position where the scan stopped (where the
    next request continues: a client streams a long search as a series of requests)."""
    limit = min(max(limit, 0), MAX_PAGE)
    offset = max(offset, 0)
    if scan is None:
        scan = HEADER_SCAN_LIMIT if criteria.header is not None else SEARCH_SCAN_LIMIT
    found: list[Browsed] = []
    position = offset
    if not limit:
        return found, position
    for item in islice(walk(queue, offset + scan), offset, None):
        if criteria.matches(item.message):
            found.append(Browsed(position, item.message, item.delivery_count > 0))
        position += 1
        if len(found) >= limit:
            break
    return found, position
