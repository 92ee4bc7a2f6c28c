"""A stream's log index: its segments and chunks, kept in memory over the entries on disk.

Theory of operation
-------------------
A stream's messages are stored as its queue entries (``persistence``: key
``(qid, offset)``, offsets from 0, never reused), so they are appended in the
group commit's batches and read back by offset from committed data. This
index is what the stream knows of them without reading them: where each
*segment* starts and ends, its bytes, and the arrival times of its first and
last *chunks*.

A chunk is one group-commit batch (RabbitMQ's osiris chunk is one write
batch): ``x-stream-offset: last`` starts at the last chunk. Every entry of a
chunk carries the chunk's arrival time in ms (stored in the entry, so it
survives a restart), strictly increasing from chunk to chunk, so that equal
times mean one chunk when the index is rebuilt from disk, and a timestamp
seek has chunk granularity as in RabbitMQ.

Segments emulate RabbitMQ's segment files: a segment closes once it holds
``x-stream-max-segment-size-bytes`` or more, at a chunk boundary, and
retention (``x-max-length-bytes``, ``x-max-age``) drops whole segments, oldest
first, never the one being written: at least one segment always stays, as
RabbitMQ "will always leave at least one segment in place". Memory is one
small record per segment, whatever the number of messages.

Pure data (no I/O, no clock): ``stream.py`` feeds it and applies what
``expired`` returns.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from leveret.queues.stream_arguments import FIRST, LAST, NEXT, OFFSET, OffsetSpec
from leveret.queues.stream_tracking import OffsetLog


class StreamLog(OffsetLog, Protocol):
    """The group commit, as a stream's retention, recovery and offset tracking use it."""

    def truncate(self, qid: int, below: int) -> None: ...

    def read_stamps(self, qid: int, from_seq: int, limit: int) -> list[tuple[int, int, int]]: ...


# Entries per read when the index is rebuilt at startup.
RECOVER_PAGE = 4096
# (offset, arrival ms, body bytes) of up to ``limit`` entries from an offset on.
StampPages = Callable[[int, int], list[tuple[int, int, int]]]


@dataclass
class Segment:
    first: int  # first offset
    next: int  # one past its last offset
    bytes: int = 0  # message body bytes
    first_ts: int = 0  # arrival ms of its first chunk
    last_ts: int = 0  # and of its last chunk

    @property
    def count(self) -> int:
        return self.next - self.first


class StreamIndex:
    """Segments of one stream, oldest first, and its chunk boundaries."""

    __slots__ = ("last_chunk", "next_offset", "segment_bytes", "segments", "total_bytes")

    def __init__(self, segment_bytes: int, next_offset: int = 0) -> None:
        self.segment_bytes = max(segment_bytes, 1)
        self.segments: deque[Segment] = deque()
        self.next_offset = next_offset  # the offset the next message gets
        self.last_chunk = next_offset  # first offset of the last chunk
        self.total_bytes = 0

    @property
    def first_offset(self) -> int:
        """The first offset still in the log (``next_offset`` when it is empty)."""
        return self.segments[0].first if self.segments else self.next_offset

    @property
    def count(self) -> int:
        return self.next_offset - self.first_offset

    @property
    def last_ts(self) -> int:
        return self.segments[-1].last_ts if self.segments else 0

    def append(self, offset: int, size: int, ts: int, new_chunk: bool) -> bool:
        """Index the entry at ``offset`` (``size`` body bytes, its chunk's arrival ``ts``);
        True when it opened a segment (retention is due)."""
        opened = False
        segments = self.segments
        if new_chunk:
            self.last_chunk = offset
        if not segments or (new_chunk and segments[-1].bytes >= self.segment_bytes):
            segments.append(Segment(offset, offset, 0, ts, ts))
            opened = True
        segment = segments[-1]
        segment.next = offset + 1
        segment.bytes += size
        segment.last_ts = ts
        self.total_bytes += size
        self.next_offset = offset + 1
        return opened

    def expired(self, max_bytes: int | None, max_age_ms: int | None,
                now_ms: int) -> list[Segment]:
        """Drop and return the oldest segments retention no longer keeps: while the log is
        over ``max_bytes``, or a segment's newest chunk is older than ``max_age_ms``; never
        the segment being written."""
        dropped: list[Segment] = []
        segments = self.segments
        while len(segments) > 1:
            oldest = segments[0]
            over_bytes = max_bytes is not None and self.total_bytes > max_bytes
            too_old = max_age_ms is not None and oldest.last_ts < now_ms - max_age_ms
            if not (over_bytes or too_old):
                break
            segments.popleft()
            self.total_bytes -= oldest.bytes
            dropped.append(oldest)
        return dropped

    def seek_time(self, ts: int) -> int:
        """Where to start reading for chunks that arrived at or after ``ts``: the start of
        the first segment holding one (the reader skips the older entries in it)."""
        for segment in self.segments:
            if segment.last_ts >= ts:
                return segment.first
        return self.next_offset


def rebuild(index: StreamIndex, read_stamps: StampPages, count: int, first_seq: int,
            next_seq: int) -> int:
    """After a restart: index the ``count`` entries on disk from ``first_seq`` (one pass
    over the store's index in pages, no message read; chunks are the runs of equal arrival
    times). Returns the last chunk's arrival ms (0 when empty)."""
    index.next_offset = index.last_chunk = first_seq
    position, last_ts = first_seq, -1
    while count:
        page = read_stamps(position, RECOVER_PAGE)
        if not page:
            break
        for seq, ts, size in page:
            index.append(seq, size, ts, ts != last_ts)
            last_ts = ts
        position = page[-1][0] + 1
    index.next_offset = max(index.next_offset, next_seq)
    return max(last_ts, 0)


def start(index: StreamIndex, spec: OffsetSpec, next_offset: int) -> tuple[int, int]:
    """(first offset to read, minimum arrival ms) for a consumer starting at ``spec``
    (``next_offset``: the offset the next publish gets, committed or not)."""
    if spec.kind == FIRST:
        return index.first_offset, 0
    if spec.kind == LAST:
        return max(index.last_chunk, index.first_offset), 0
    if spec.kind == NEXT:
        return next_offset, 0
    if spec.kind == OFFSET:
        return min(max(spec.value, index.first_offset), next_offset), 0
    return index.seek_time(spec.value), spec.value
