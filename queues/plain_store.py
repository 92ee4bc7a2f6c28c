"""The ready store of a queue without per-message features: FIFO, paged to disk.

Theory of operation
-------------------
Ready entries live in ``fresh``, a deque of never-delivered entries in
sequence order, and ``returned``, a heap of requeued entries. Delivery only
ever takes from the head, so every requeued entry is older than every fresh
one: taking the heap first (smallest sequence first) and then the deque puts a
requeued message back "in its original position", as RabbitMQ does since 2.7.

A durable queue keeps at most ``page_high`` ready entries in memory (``paging.py``:
the broker's bound, 10,000 by default; ``PAGE_HIGH`` for a lazy queue or under memory
pressure); beyond that new entries exist only in the disk store (the ``Tail``,
``ready.py``) and are read back in order, ``PAGE_BATCH`` at a time, as the head drains. A
restarted queue starts with everything in its tail: startup reads nothing.
A transient message paged out is stored too (flagged transient, dropped at the
next restart), since memory no longer holds it.

This store does no per-message work beyond the deque: no clock, no byte count.
The management plane's byte totals count its in-memory entries when asked
(``memory_bytes``): the fresh deque through ``FifoBytes`` (``fifo_bytes.py``:
what changed since the last count), the requeued entries in full.
When a tail read brings back an entry with an expiry, the queue switches to a
featured store (``Owner.needs_expiry``).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Collection, Iterator

from leveret.model.message import Message
from leveret.queues.deleted import DeletedOwner
from leveret.queues.entry import PublishResult, QueueEntry
from leveret.queues.fifo_bytes import FifoBytes
from leveret.queues.ready import (
    Owner,
    Tail,
    fifo_segments,
    page_out_fresh,
    purge_ready,
    take_entries,
)

# Ready entries a lazy durable queue (or any, under memory pressure: paging.py) holds at
# most in memory before paging new ones to the store only, and how many it reads back at once
# when its in-memory head runs dry.
PAGE_HIGH = 10_000
PAGE_BATCH = 2_000

_ACCEPTED = PublishResult.ACCEPTED
_HELD = PublishResult.HELD


class PlainStore:
    expires = False  # entries never expire here (see the module docstring)

    __slots__ = ("_owner", "_sized", "fresh", "returned", "tail")

    def __init__(self, owner: Owner) -> None:
        self._owner = owner
        self.fresh: deque[QueueEntry] = deque()
        self.returned: list[QueueEntry] = []
        self.tail = Tail(owner)
        # Counts ``fresh``'s bytes when asked; told when it changes otherwise than by
        # appends and pops from the left (take, forget, purge).
        self._sized = FifoBytes()

    def __len__(self) -> int:
        return len(self.fresh) + len(self.returned) + self.tail.count

    @property
    def backlog(self) -> int:
        return len(self.fresh) + self.tail.count

    @property
    def paged_out(self) -> int:
        return self.tail.count

    def memory_bytes(self) -> int:
        # Counted when asked, so that enqueue and pop count nothing.
        return self._sized.count(self.fresh) + sum(len(e.message.body) for e in self.returned)

    @property
    def paged_out_bytes(self) -> int:
        tail = self.tail
        return (tail.bytes or 0) if tail.count else 0

    def segments(self, visit: int) -> Iterator[QueueEntry | Tail]:
        return fifo_segments(self.returned, self.fresh, self.tail, visit)

    def tail_of(self, entry: object) -> Tail:
        return self.tail

    def enqueue(self, seq: int, message: Message) -> PublishResult:
        owner = self._owner
        log = owner.log
        if log is None:
            self.fresh.append(QueueEntry(seq, message))
            return _ACCEPTED
        persistent = message.persistent
        tail = self.tail
        if tail.count or len(self.fresh) >= owner.page_high:
            # Paging: the entry lives only in the store until the head needs it.
            tail.append(seq, len(message.body))
            log.enqueue(owner.qid, seq, message, not persistent)
            owner.written(seq)
            return _HELD if persistent else _ACCEPTED
        entry = QueueEntry(seq, message)
        self.fresh.append(entry)
        if persistent:
            entry.stored = True
            log.enqueue(owner.qid, seq, message)
            owner.written(seq)
            return _HELD
        return _ACCEPTED

    def pop(self) -> QueueEntry | None:
        if self.returned:
            return heapq.heappop(self.returned)
        fresh = self.fresh
        if not fresh and (not self.tail.count or not self._refill()):
            return None
        return fresh.popleft()

    def unpop(self, entry: QueueEntry) -> None:
        # Older than every fresh entry, and the oldest of the requeued ones: the heap's top.
        heapq.heappush(self.returned, entry)

    requeue = unpop

    def after_change(self) -> None:
        pass

    def _refill(self) -> bool:
        """Read the next committed tail entries into the head; False if none came."""
        want = min(PAGE_HIGH - len(self.fresh), PAGE_BATCH, self.tail.count)
        if want <= 0:
            return False
        stored = self.tail.read(want)
        fresh = self.fresh
        expiring = False
        # Unpacked as tuples: no attribute lookup on each (``StoredEntry`` is one).
        for seq, delivery_count, message, expires_at in stored:
            entry = QueueEntry(seq, message)
            entry.delivery_count = delivery_count
            entry.stored = True
            if expires_at:
                entry.expires_at = expires_at
                expiring = True
            fresh.append(entry)
        if expiring:
            # A message with an expiration in a queue without TTL: a featured store takes
            # over (and everything this store holds); the caller's pop finds nothing here.
            self._owner.needs_expiry()
            return False
        return bool(stored)

    def page_out(self, keep: int) -> None:
        if self._owner.log is not None and page_out_fresh(self.fresh, self.tail, keep):
            self._sized.invalidate()

    def take_all(self) -> tuple[list[QueueEntry], Tail]:
        """Hand everything over to a featured store: ready entries in order, and the tail."""
        entries = sorted(self.returned)
        entries.extend(self.fresh)
        self.returned = []
        self.fresh = deque()
        tail, self.tail = self.tail, Tail(self._owner)
        return entries, tail

    def purge(self) -> int:
        count = len(self)
        purge_ready(self._owner, self.fresh, self.returned, self.tail)
        self._sized.invalidate()
        return count

    def take(self, seqs: Collection[int]) -> list[QueueEntry]:
        self.fresh, self.returned, taken = take_entries(self.fresh, self.returned, seqs)
        self._sized.invalidate()
        return taken

    def recover(self, count: int, first_seq: int, size: int | None = None) -> None:
        self.tail.count = count
        self.tail.first = first_seq
        self.tail.bytes = size  # the store's total (None: not known, a store of format 2)

    def forget(self, start: int, end: int) -> int:
        def failed(e: QueueEntry) -> bool:
            return e.stored and start <= e.seq < end

        lost = self.tail.forget(start, end)
        fresh = self.fresh
        if fresh and fresh[-1].seq >= start and any(map(failed, fresh)):
            kept = [e for e in fresh if not failed(e)]
            lost += len(fresh) - len(kept)
            self.fresh = deque(kept)
            self._sized.invalidate()
        if any(map(failed, self.returned)):
            kept = [e for e in self.returned if not failed(e)]
            lost += len(self.returned) - len(kept)
            heapq.heapify(kept)
            self.returned = kept
        return lost

    def close(self) -> None:
        self._owner = DeletedOwner(self._owner)
        self.tail.detach(self._owner)
