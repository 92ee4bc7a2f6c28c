"""Body bytes of a plain store's ``fresh`` deque, counted at read time, incrementally.

Theory of operation
-------------------
The plain store counts no bytes as entries come and go (``plain_store.py``):
the management plane sums them when it asks. A transient queue never pages,
so a plain sum is O(depth) on every API call or scrape (30 to 50 ms for a million
entries, on the event loop). ``FifoBytes`` makes a repeated count cost what
changed since the last one instead, without touching the deque's hot path.

It relies on how the deque changes: entries are appended on the right in
increasing sequence order and leave from the left; whatever else changes it
(a purge, a management ``take``, a failed write) calls ``invalidate``. So the
memo keeps, from the counts it made, the running total of the bytes it
has seen (``_end``), the sequence number of the last entry seen, and a *mark*
every ``STEP`` entries: sequence number -> (position, bytes before it). At
the next count:

* the entries left on the left are accounted for by the first mark still in
  the deque: walk from the head to it (fewer than ``STEP`` entries);
* the entries appended on the right are those after the last one seen: walk
  from the right end while they are newer (and mark them);
* if the positions do not add up to the deque's length, or no mark is found
  (or after ``invalidate``), count everything again (and mark it).

The memo holds sequence numbers and integers only, never an entry: a message
that left the queue is not kept alive by it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from itertools import islice
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leveret.queues.entry import QueueEntry

# Entries between two marks: the most a count walks from the head to find one.
STEP = 1_024


class FifoBytes:
    __slots__ = ("_end", "_last", "_marks", "_order", "_position")

    def __init__(self) -> None:
        self._marks: dict[int, tuple[int, int]] = {}  # seq -> (position, bytes before it)
        self._order: deque[int] = deque()  # the marks' sequence numbers, oldest first
        self._position = 0  # entries seen (the position after the last one)
        self._end = 0  # bytes seen (before position ``_position``)
        self._last = -1  # sequence number of the last entry seen

    def count(self, fresh: deque[QueueEntry]) -> int:
        """Body bytes of the entries of ``fresh`` (O(entries changed since the last count),
        O(len) the first time or after anything but appends and pops from the left)."""
        if not fresh:
            self._reset()
            return 0
        head = self._head(fresh)
        if head is not None and self._appended(fresh):
            head_position, head_bytes = head
            if self._position - head_position == len(fresh):  # positions add up
                return self._end - head_bytes
        self._reset()
        self._extend(fresh)
        return self._end

    def invalidate(self) -> None:
        """The deque changed otherwise than by appends and pops from the left."""
        self._reset()

    def _reset(self) -> None:
        self._marks.clear()
        self._order.clear()
        self._position = self._end = 0
        self._last = -1

    def _head(self, fresh: deque[QueueEntry]) -> tuple[int, int] | None:
        """(position, bytes before) of the head entry, from the first mark still present."""
        order, marks = self._order, self._marks
        first = fresh[0].seq
        while order and order[0] < first:  # marks of entries that left on the left
            del marks[order.popleft()]
        if not order:
            return None
        target = order[0]
        skipped = 0  # bytes of the entries before the mark
        for walked, entry in enumerate(islice(fresh, STEP + 1)):
            if entry.seq == target:
                position, before = marks[target]
                return position - walked, before - skipped
            skipped += len(entry.message.body)
        return None

    def _appended(self, fresh: deque[QueueEntry]) -> bool:
        """Count and mark the entries appended since the last count; False if the last entry
        seen is gone (not an append-only change)."""
        last = self._last
        new: list[QueueEntry] = []
        for entry in reversed(fresh):
            if entry.seq <= last:
                if entry.seq != last:
                    return False
                break
            new.append(entry)
        else:
            return False  # every entry is new: the last one seen left
        new.reverse()
        self._extend(new)
        return True

    def _extend(self, entries: Iterable[QueueEntry]) -> None:
        """Count ``entries`` (the next ones in order) and mark one every STEP positions."""
        position, end, last = self._position, self._end, self._last
        marks, order = self._marks, self._order
        it = iter(entries)
        while True:
            gap = -position % STEP  # entries before the next mark
            chunk = list(islice(it, gap or STEP))
            if not chunk:
                break
            if not gap:
                last = chunk[0].seq
                marks[last] = (position, end)
                order.append(last)
            position += len(chunk)
            end += sum(len(e.message.body) for e in chunk)
            last = chunk[-1].seq
        self._position, self._end, self._last = position, end, last
