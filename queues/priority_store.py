"""The ready store of a priority queue (``x-max-priority``): featured, ordered by priority.

Theory of operation
-------------------
A ``FeaturedStore`` (TTL and limits apply to priority queues too) whose
in-memory entries all live in one heap ordered by (priority descending,
sequence ascending), see ``priority.py``: the fresh deque stays empty. A
requeued entry keeps its sequence number and priority, hence its place. As
LavinMQ's ``PriorityQueue``, it is chosen once, when the queue is created (the
maximum priority is an argument, policies cannot change it).

A durable priority queue pages as RabbitMQ's does, one backing queue per
priority level: at most ``PAGE_HIGH`` entries in the heap, and past that each
level has its own paged-out tail (``ready.IndexedTail``: the level's sequence
numbers, about 4 bytes an entry, and the bodies on disk). The rule that keeps
delivery order is the plain store's, per level: once a level has a tail, its
new entries go to that tail, so every in-memory entry of a level is older than
its tail's. The next entry is then the heap's top unless a *higher* level has
a tail; that tail is read into the heap first (``PAGE_BATCH`` at a time). A
restarted queue scans its stored entries once, in sequence order, to rebuild
the levels (reading the bodies' priorities, not keeping them).

The store keeps each level together, because a level drains on its own: an
entry's sequence number is the queue's counter under its level
(``SEQ_CLUSTER_SHIFT``), so the index keys of a level are contiguous (and
sequence order is delivery order), and its message's id carries the level too
(``_cluster``). Otherwise every ack rewrites a page shared with other levels.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from leveret.model.message import Message
from leveret.persistence.batch import SEQ_CLUSTER_SHIFT
from leveret.persistence.store import StoredEntry
from leveret.queues import plain_store
from leveret.queues.entry import PriorityEntry, PublishResult, QueueEntry
from leveret.queues.featured_store import FeaturedStore
from leveret.queues.priority import effective_priority
from leveret.queues.ready import IndexedTail, Owner, Tail

# Stored entries read at once when a restarted queue rebuilds its levels.
RECOVER_BATCH = 2_000


class PriorityStore(FeaturedStore):
    __slots__ = ("_levels", "tails")

    def __init__(self, owner: Owner) -> None:
        self.tails: dict[int, IndexedTail] = {}  # priority level -> its paged-out entries
        self._levels: list[int] = []  # the levels with a tail, highest first
        super().__init__(owner)

    def enqueue(self, seq: int, message: Message) -> PublishResult:
        # The level above the queue's counter: each level's index entries are contiguous in
        # the store (see _cluster), and delivery order is sequence order within a level.
        level = effective_priority(message.priority, self._owner.settings.max_priority or 0)
        return super().enqueue(seq | (255 - level) << SEQ_CLUSTER_SHIFT, message)

    def _new_entry(self, seq: int, message: Message) -> QueueEntry:
        return PriorityEntry(seq, message, self._owner.settings.max_priority or 0)

    def _push(self, entry: QueueEntry, requeued: bool) -> None:
        self.bytes += len(entry.message.body)
        heapq.heappush(self.returned, entry)

    def close(self) -> None:
        super().close()
        for tail in self.tails.values():
            tail.detach(self._owner)

    # -- paging --------------------------------------------------------------------------

    @property
    def paged_out(self) -> int:
        tails = self.tails
        return sum(tails[level].count for level in self._levels)

    @property
    def paged_out_bytes(self) -> int:
        tails = self.tails
        return sum(tails[level].bytes or 0 for level in self._levels if tails[level].count)

    def __len__(self) -> int:
        return len(self.returned) + self.paged_out

    @property
    def backlog(self) -> int:
        return len(self)

    def _page_to(self, entry: QueueEntry) -> Tail | None:
        assert isinstance(entry, PriorityEntry)
        tail = self.tails.get(entry.priority)
        if tail is not None and tail.count:
            return tail
        if len(self.returned) < plain_store.PAGE_HIGH:
            return None
        return tail or self._new_tail(entry.priority)

    def page_out(self, keep: int) -> None:
        """Nothing to do: a priority queue always pages at ``PAGE_HIGH`` (its heap is not
        FIFO, so memory-driven paging is not done here; ``paging.py``)."""

    def _cluster(self, entry: QueueEntry) -> int:
        # Each level's messages together in the store, highest level first: a level drains
        # page by page instead of rewriting a page shared with other levels for every ack
        # (300k x 10 levels: drain 29k -> 39k msg/s, RssAnon peak 276 -> 68 MiB).
        return 255 - entry.priority  # type: ignore[attr-defined, no-any-return]

    def _new_tail(self, level: int) -> IndexedTail:
        tail = self.tails[level] = IndexedTail(self._owner)
        self._levels.append(level)
        self._levels.sort(reverse=True)
        return tail

    def _ready_top(self) -> bool:
        """Make the heap's top the next entry to deliver, reading a higher level's tail in
        first; False when that tail's next entries are not committed yet (wait for them)."""
        returned = self.returned
        top = returned[0].priority if returned else -1  # type: ignore[attr-defined]
        tails = self.tails
        for level in self._levels:
            if level <= top:
                return True
            tail = tails[level]
            if tail.count:
                return self._refill_from(tail, plain_store.PAGE_BATCH)
        return True

    def _head(self) -> QueueEntry | None:
        if self._levels and not self._ready_top():
            return None
        return self.returned[0] if self.returned else None

    def _pop_head(self) -> QueueEntry | None:
        if self._levels and not self._ready_top():
            return None
        if not self.returned:
            return None
        entry = heapq.heappop(self.returned)
        self.bytes -= len(entry.message.body)
        return entry

    def _refill(self) -> None:
        self._ready_top()

    def _bytes(self) -> int:
        if self._owner.settings.max_length_bytes is None:
            return 0
        tails = self.tails
        return self.bytes + sum(tails[level].byte_total() for level in self._levels
                                if tails[level].count)

    # -- browsing and management ------------------------------------------------------------

    def segments(self, visit: int) -> Iterator[QueueEntry | Tail]:
        returned = self.returned
        memory = heapq.nsmallest(visit, returned) if len(returned) > visit else sorted(returned)
        tails = [self.tails[level] for level in self._levels if self.tails[level].count]
        levels = [level for level in self._levels if self.tails[level].count]
        i = 0
        for entry in memory:
            # A level's tail follows that level's entries in memory: yield the tails of the
            # levels above this entry's first.
            while i < len(levels) and levels[i] > entry.priority:  # type: ignore[attr-defined]
                yield tails[i]
                i += 1
            yield entry
        yield from tails[i:]

    def tail_of(self, entry: object) -> Tail:
        assert isinstance(entry, (QueueEntry, StoredEntry))
        level = effective_priority(entry.message.priority, self._owner.settings.max_priority or 0)
        return self.tails[level]

    def purge(self) -> int:
        count = super().purge()
        log = self._owner.log
        if log is not None and not self._owner.deleted:  # deleted: the store drops them all
            qid = self._owner.qid
            for tail in self.tails.values():
                # Not a range purge: the queue's unacked entries are interleaved with these.
                for seq in tail.index:
                    if seq not in tail.removed:
                        log.remove(qid, seq)
        self.tails.clear()
        self._levels.clear()
        return count

    def recover(self, count: int, first_seq: int, size: int | None = None) -> None:
        """Rebuild the levels from the stored entries, in sequence order (see the module
        docstring); the first ``PAGE_HIGH`` stay in memory, as if just published. Every
        entry is read, so the levels' byte totals are exact whatever ``size`` says."""
        log = self._owner.log
        assert log is not None
        qid, seen, start = self._owner.qid, 0, first_seq
        while seen < count:
            batch = log.read_queue(qid, start, min(RECOVER_BATCH, count - seen))
            if not batch:
                break
            start = batch[-1].seq + 1
            seen += len(batch)
            for item in batch:
                entry = self._new_entry(item.seq, item.message)
                tail = self._page_to(entry)
                if tail is not None:
                    tail.append(item.seq, len(item.message.body))
                    continue
                entry.delivery_count = item.delivery_count
                entry.stored = True
                if item.expires_at:
                    entry.expires_at = item.expires_at
                self._push(entry, False)
        head = self._head()
        if head is not None and head.expires_at is not None:
            # Not now: the dead-letter exchange's bindings are not recovered yet.
            self._expiry.arm(head.expires_at)

    def forget(self, start: int, end: int) -> int:
        lost = super().forget(start, end)
        return lost + sum(tail.forget(start, end) for tail in self.tails.values())
