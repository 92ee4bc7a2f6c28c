"""Browse a stream's log by offset or arrival time without reading it as a consumer.

A stream's console peek cannot walk a ready list (a stream has none: every
message stays in the log). This reads the committed log from an offset, or from
the first chunk that arrived at or after a time (``StreamIndex.seek_time``, then
the older entries of that segment skipped), straight from the store in batches
of ``browse.BROWSE_BATCH``: no reader is created, no credit, offset or tracking
record changes, and the readers' shared pages (``stream_cache.py``) are not
touched. Messages are shown as published (the ``x-stream-offset`` header a
delivery carries is the offset shown beside them).

Work is bounded per request as for a queue (``browse.py``): a peek returns at
most ``browse.MAX_PAGE`` messages, a search looks at most at
``browse.SEARCH_SCAN_LIMIT`` entries (``HEADER_SCAN_LIMIT`` with a header) and
says the offset where it stopped, for the next request to continue from.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from leveret.model.message import Message
from leveret.queues import browse

if TYPE_CHECKING:
    from leveret.persistence.store import StoredEntry
    from leveret.queues.stream import Stream


class Logged(NamedTuple):
    """A message of the log as the console shows it."""

    offset: int
    message: Message
    timestamp: int  # its chunk's arrival, ms since the epoch


def start(stream: Stream, offset: int | None, timestamp_ms: int | None) -> tuple[int, int]:
    """(first offset to look at, minimum arrival ms): ``offset`` clamped to the log, or the
    segment holding the first chunk that arrived at or after ``timestamp_ms``."""
    if timestamp_ms is not None:
        return stream.log_index.seek_time(timestamp_ms), timestamp_ms
    return min(max(offset or 0, stream.first_offset), stream.committed_offset), 0


def entries(stream: Stream, offset: int, visit: int) -> Iterator[StoredEntry]:
    """At most ``visit`` committed entries from ``offset`` on."""
    queue_log = stream.log
    end = stream.committed_offset
    while visit > 0 and offset < end and queue_log is not None and not stream.deleted:
        batch = queue_log.read_queue(stream.qid, offset, min(visit, browse.BROWSE_BATCH))
        if not batch:
            return
        for stored in batch:
            if stored.seq >= end:
                return
            yield stored
        visit -= len(batch)
        offset = batch[-1].seq + 1


def peek(stream: Stream, offset: int | None, timestamp_ms: int | None,
         count: int) -> list[Logged]:
    """Up to ``count`` messages of the log from an offset or a time, in offset order."""
    first, min_ts = start(stream, offset, timestamp_ms)
    count = min(max(count, 0), browse.MAX_PAGE)
    out: list[Logged] = []
    for stored in entries(stream, first, browse.SEARCH_SCAN_LIMIT):
        if stored.expires_at < min_ts:  # a stream entry's arrival time
            continue
        out.append(Logged(stored.seq, stored.message, stored.expires_at))
        if len(out) >= count:
            break
    return out


def search(stream: Stream, criteria: browse.Criteria, limit: int, offset: int | None,
           timestamp_ms: int | None) -> tuple[list[Logged], int]:
    """Up to ``limit`` matching messages from an offset or a time, looking at a bounded
    number of entries; and the offset where the scan stopped."""
    limit = min(max(limit, 0), browse.MAX_PAGE)
    position, min_ts = start(stream, offset, timestamp_ms)
    scan = browse.HEADER_SCAN_LIMIT if criteria.header is not None else browse.SEARCH_SCAN_LIMIT
    found: list[Logged] = []
    if not limit:
        return found, position
    for stored in entries(stream, position, scan):
        position = stored.seq + 1
        if stored.expires_at >= min_ts and criteria.matches(stored.message):
            found.append(Logged(stored.seq, stored.message, stored.expires_at))
            if len(found) >= limit:
                break
    return found, position
