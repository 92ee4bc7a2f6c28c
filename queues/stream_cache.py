"""Pages of a stream's log read once and shared by its readers, bounded by bytes.

Theory of operation
-------------------
Consumers of a stream often read the same offsets at about the same time (all
from ``first`` after a replay, or all at the tail). Without sharing, each one
reads each entry from the store, decodes it and splices its ``x-stream-offset``
header (``stream_header.py``): ten consumers, ten times the work. Here the log
is cut into *pages* of ``PAGE`` offsets aligned on multiples of ``PAGE``; a
page is read in one store transaction, each entry prepared once for delivery
(its message with the ``x-stream-offset`` header already in its properties, and,
while the stream has more than one reader, its content frames encoded by its first
delivery and reused by the others on a channel of the same number and frame_max: only
the deliver method frame is each consumer's; a lone reader encodes each delivery whole,
``Reader.deliver_run``), and kept while it fits in ``CACHE_BYTES``. A reader takes a slice
of a page: the entries themselves are shared, never copied.

Eviction knows where the readers are (``positions``), since least-recently-used
is the wrong order for readers scanning forward at different speeds: the page
the leader read first is the very one the laggard needs next. Out go first the
pages no reader still has to read (every reader is past them), then the page
farthest ahead of the nearest reader behind it (needed last).

A page is complete up to ``end``, the committed end of the log when it was read
(at most its last offset + 1): a reader at or past ``end`` of a partly written
page extends it with one read from ``end``, so readers at the tail cost one read
per commit batch between them, not one each. Retention drops the pages below
the new first offset (``drop_below``), so no reader is given an entry the log no
longer has.

Memory is ``CACHE_BYTES`` per stream (bodies and properties, and their
frames) plus what readers' read-aheads still hold of evicted pages
(``stream_reader.READ_AHEAD`` entries each at most): bounded, whatever the
length of the log.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from leveret.model.message import Message
from leveret.persistence.store import StoredEntry
from leveret.queues.stream_header import OffsetSplicer

if TYPE_CHECKING:
    from collections.abc import Sequence

# Offsets per page: one store read (one LMDB transaction) prepares this many entries.
PAGE = 128
# Bytes a stream keeps prepared for its readers, at most: bodies and properties, and their
# encoded content frames (``Prepared.size``).
CACHE_BYTES = 16 * 1024 * 1024
# A content header frame's and a body frame's own bytes (7-byte frame header and the frame
# end each, and the header's class, weight and body size).
FRAMES_OVERHEAD = 2 * 8 + 12

# (first offset, how many entries at most) -> the entries in the store from there.
ReadEntries = Callable[[int, int], "Sequence[StoredEntry]"]


def _seq(entry: Prepared) -> int:
    return entry.seq


class Prepared:
    """One entry of a page, as every reader delivers it: its message carries the
    ``x-stream-offset`` header, and its content frames (``frames``) are encoded by the
    first delivery and reused by the others (``consumer.SharedContent``)."""

    __slots__ = ("expires_at", "frames", "frames_key", "message", "seq")

    def __init__(self, seq: int, message: Message, expires_at: int) -> None:
        self.seq = seq
        self.message = message
        self.expires_at = expires_at  # the chunk's arrival ms (stream_log.py)
        self.frames = b""
        self.frames_key = 0  # not encoded yet

    @property
    def size(self) -> int:
        """What it holds at most, counted when it is read: its body and properties, and
        their encoded frames."""
        message = self.message
        return 2 * (len(message.body) + len(message.raw_properties)) + FRAMES_OVERHEAD


def prepared(stored: StoredEntry, splicer: OffsetSplicer) -> Prepared:
    """``stored`` ready to deliver: its properties carry ``x-stream-offset``."""
    seq, _, message, expires_at = stored  # a tuple: unpacked at once, not field by field
    raw = message.raw_properties
    try:
        spliced = splicer.splice(raw, seq)
    except ValueError:
        spliced = raw  # accepted at publish; relayed as it is
    return Prepared(seq, Message(message.exchange, message.routing_key, spliced, message.body),
                    expires_at)


class _Page:
    __slots__ = ("bytes", "end", "entries")

    def __init__(self) -> None:
        self.entries: list[Prepared] = []
        self.end = 0  # offsets below it (in this page) are all in ``entries``
        self.bytes = 0


class PageCache:
    """The prepared pages of one stream's log."""

    __slots__ = ("_pages", "_positions", "_read", "_splicer", "bytes", "max_bytes", "reads")

    def __init__(self, read: ReadEntries, positions: Callable[[], Iterable[int]],
                 max_bytes: int = CACHE_BYTES) -> None:
        self._read = read
        self._positions = positions  # the readers' next offsets
        self._pages: dict[int, _Page] = {}  # by first offset
        self._splicer = OffsetSplicer()  # the x-stream-offset header of each entry read
        self.max_bytes = max_bytes
        self.bytes = 0
        self.reads = 0  # store reads (for tests and the curious)

    def entries(self, position: int, committed: int, limit: int) -> tuple[list[Prepared], int]:
        """Up to ``limit`` entries from ``position`` on (below ``committed``), from one
        page, and the offset to read next when they are consumed (past a gap: the page's
        end)."""
        start = position - position % PAGE
        pages = self._pages
        page = pages.get(start)
        if page is None:
            page = pages[start] = _Page()
            page.end = start
        if position >= page.end:
            self._extend(page, start, committed)
            self._evict(keep=start)
        entries = page.entries
        first = bisect_left(entries, position, key=_seq)
        out = entries[first:first + limit]
        return out, out[-1].seq + 1 if out else page.end

    def _extend(self, page: _Page, start: int, committed: int) -> None:
        end = min(start + PAGE, committed)
        if end <= page.end:
            return
        self.reads += 1
        added = 0
        splicer = self._splicer
        for stored in self._read(page.end, end - page.end):
            if stored.seq >= end:
                break
            entry = prepared(stored, splicer)
            page.entries.append(entry)
            added += entry.size
        page.end = end
        page.bytes += added
        self.bytes += added

    def _evict(self, keep: int) -> None:
        """Over the bound: drop pages, those needed last first (see the module docstring)."""
        pages = self._pages
        if self.bytes <= self.max_bytes:
            return
        positions = sorted(self._positions())

        def needed_in(start: int) -> int:
            """How far behind the page its nearest reader is (no reader: never needed)."""
            behind = bisect_left(positions, start + PAGE) - 1  # readers before its end
            return start - positions[behind] if behind >= 0 else 1 << 62

        for start in sorted(pages, key=needed_in, reverse=True):
            if self.bytes <= self.max_bytes:
                break
            if start != keep:
                self.bytes -= pages.pop(start).bytes

    def drop_below(self, first_offset: int) -> None:
        """Retention dropped the offsets below ``first_offset``: forget pages holding any."""
        for start in [s for s in self._pages if s < first_offset]:
            self.bytes -= self._pages.pop(start).bytes

    def clear(self) -> None:
        self._pages.clear()
        self.bytes = 0
