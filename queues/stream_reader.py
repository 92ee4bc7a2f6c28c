"""One stream consumer's place in the log: its next offset, its read-ahead and what it skips.

A stream consumer never takes a message: it reads the log from an offset on.
Its ``Reader`` holds the next offset to deliver and a read-ahead of at most
``READ_AHEAD`` entries (no more than its credit unless it skips entries), so
memory is bounded per consumer whatever the length of the log. What it skips
is decided here: the chunks before a timestamp seek (arrival times grow with
offsets, so the seek ends at the first entry at or after it) and, with
``x-stream-filter``, the entries whose ``x-stream-filter-value`` is not among
its values. The filter is exact, per message (RabbitMQ's per-chunk Bloom filter
lets false positives through and asks clients to filter again).

Pure data: ``stream.py`` feeds it entries read from the store. Compiled, a ``Reader`` is
an extension type (``stream_reader.pxd``) whose ``deliver_run``, the per-delivery loop of
the usual reader, runs in C.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING

from leveret.model.message import Message
from leveret.queues.entry import QueueEntry

if TYPE_CHECKING:
    from leveret.queues.consumer import Consumer
    from leveret.queues.dispatch import Dispatcher
    from leveret.queues.queue import Queue
    from leveret.queues.stream_cache import Prepared
    from leveret.queues.stream_tracking import AckWindow

# Entries a reader reads from the store at once, at most (and no more than its consumer's
# credit): its memory bound.
READ_AHEAD = 128
FILTER_VALUE = "x-stream-filter-value"


class Reader:
    """One consumer's place in the log."""

    __slots__ = ("ahead", "consumer", "filters", "match_unfiltered", "min_ts", "position",
                 "window")

    def __init__(self, consumer: Consumer, position: int, min_ts: int = 0,
                 filters: frozenset[str] | None = None, match_unfiltered: bool = False,
                 window: AckWindow | None = None) -> None:
        self.consumer = consumer
        self.window = window  # offset tracking on: what it settled (stream_tracking.py)
        self.position = position  # the next offset to deliver
        self.ahead: deque[Prepared] = deque()  # read from the store, not yet delivered
        self.min_ts = min_ts  # a timestamp seek: skip chunks that arrived before it
        self.filters = filters  # x-stream-filter values (None: no filtering)
        self.match_unfiltered = match_unfiltered

    @property
    def plain(self) -> bool:
        """Delivers every entry it reads and tracks nothing (the usual reader)."""
        return self.filters is None and not self.min_ts and self.window is None

    def page_size(self) -> int:
        """Entries to take next from the shared pages: its prefetch at most (its memory
        follows its window; its remaining credit would be a take per ack), unless it skips
        entries (a filter, a timestamp seek)."""
        if self.filters is None and not self.min_ts:
            return min(READ_AHEAD, max(self.consumer.prefetch, 1))
        return READ_AHEAD

    def deliver_run(self, dispatcher: Dispatcher, queue: Queue, share_frames: bool) -> None:
        """Deliver the read-ahead while the consumer has credit, for a ``plain`` reader:
        each delivery's entry is its own, its message the page's. With ``share_frames``
        (other readers may deliver the same entries) the content frames are encoded once
        and kept on the page; a lone reader would only pay to keep them, so its deliveries
        are encoded whole, in one join, as a queue's are."""
        ahead = self.ahead
        can_take = self.consumer.can_take
        shared = None
        while ahead and can_take() and not queue.deleted:
            shared = ahead.popleft()
            self.deliver(dispatcher, shared, share_frames)
        if shared is not None:
            self.position = shared.seq + 1

    def deliver(self, dispatcher: Dispatcher, shared: Prepared, share_frames: bool) -> None:
        """One delivery of ``shared`` to this reader's consumer (``deliver_run``'s, and the
        stream's for a reader that seeks, filters or tracks)."""
        consumer = self.consumer
        entry = QueueEntry(shared.seq, shared.message)
        entry.holder = consumer
        dispatcher.unacked += 1
        dispatcher.delivered += 1
        if share_frames:
            consumer.deliver_shared(entry, shared)
        else:
            consumer.deliver(entry)

    def wants(self, entry: Prepared) -> bool:
        if self.min_ts:
            if entry.expires_at < self.min_ts:
                return False
            self.min_ts = 0  # arrival times grow with offsets: the seek is over
        if self.filters is None:
            return True
        headers = _headers(entry.message)
        value = headers.get(FILTER_VALUE) if headers else None
        if value is None:
            return self.match_unfiltered
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        return value in self.filters


def _headers(message: Message) -> Mapping[str, object] | None:
    try:
        return message.headers
    except ValueError:
        return None
