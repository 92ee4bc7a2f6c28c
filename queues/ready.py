"""What a queue's ready store is, and the paged-out tail the stores share.

Theory of operation
-------------------
A queue keeps its *ready* messages (enqueued, not delivered or requeued since)
in one store, chosen once from its settings (``Queue._choose_store``):

* ``PlainStore`` (``plain_store.py``): no per-message features; a durable
  queue pages its tail out to the disk store.
* ``FeaturedStore`` (``featured_store.py``): message TTL and length limits;
  pages like the plain store (both act at the head, on totals).
* ``PriorityStore`` (``priority_store.py``): ``x-max-priority``; a featured
  store whose entries are ordered by priority first, paged one tail per
  priority level (``IndexedTail``).

A plain queue switches once to a featured store when it first meets a message
with an ``expiration`` (or a policy gives it a TTL or a limit), as LavinMQ's
queue flavours are chosen once instead of testing a flag on every call.

All stores answer the ``ReadyStore`` protocol; the queue's single dispatch
loop calls ``pop`` only. A store reaches what it needs of its queue through
``Owner``: the group commit and queue id for durable entries, the settings
and clocks for TTL and limits, and ``drop`` to dead-letter what it discards.

``Tail`` is the part of a durable queue that lives only in the disk store:
``count`` entries from sequence ``first`` on, read back in order as the
in-memory head drains (``IndexedTail``: entries that are not consecutive, read
by their sequence numbers). The disk store only returns committed entries, so a
read that comes up short waits for the next commit and then wakes the queue.
Single entries can be taken out of the middle of the tail (the console's
redrive, move and delete by position): they are set aside in ``removed`` until
reads have passed them, since the disk store forgets them only at the next
commit and a read before it would still return them.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Collection, Iterator, Sequence
from itertools import islice
from operator import attrgetter
from typing import TYPE_CHECKING, Protocol

from leveret.persistence.batch import SEQ_MASK
from leveret.queues.host import QueueLog

_message_of = attrgetter("message")

if TYPE_CHECKING:
    from leveret.model.message import Message
    from leveret.persistence.store import StoredEntry
    from leveret.queues.entry import PublishResult, QueueEntry
    from leveret.queues.settings import QueueSettings
    from leveret.queues.ttl import Timekeeping


class Owner(Protocol):
    """What a ready store needs from its queue."""

    log: QueueLog | None  # the group commit, for durable queues
    qid: int
    page_high: int  # ready entries kept in memory before new ones page out (paging.py)
    settings: QueueSettings
    time: Timekeeping
    deleted: bool

    def drop(self, entry: QueueEntry, reason: str) -> None:
        """``entry`` leaves the queue dead (expired, over a limit): dead-letter, forget."""

    def refuse(self, message: Message) -> None:
        """A message refused by reject-publish(-dlx) overflow."""

    def written(self, seq: int) -> None:
        """The enqueue of ``seq`` was recorded in the disk store's pending batch."""

    def needs_expiry(self) -> None:
        """A plain store met an entry with an expiration: switch to a featured store."""

    def wake(self) -> None:
        """Entries became available (tail committed): deliver if consumers can take."""


class ReadyStore(Protocol):
    # Entries may expire (TTL): publish and settings changes call ``after_change``.
    expires: bool
    # The containers, in delivery order (``browse.py`` walks them without changing them).
    returned: list[QueueEntry]  # requeued entries: a heap
    fresh: deque[QueueEntry]
    tail: Tail  # the paged-out part (empty for transient queues)

    def __len__(self) -> int:
        """Ready entries, paged-out ones included (queue.declare-ok's message_count)."""

    @property
    def backlog(self) -> int:
        """Ready entries as flow control counts them."""

    def enqueue(self, seq: int, message: Message) -> PublishResult:
        """A new message at the back (recorded in the disk store when it must be)."""

    def pop(self) -> QueueEntry | None:
        """Remove and return the entry to deliver next (expired ones are dropped on the way)."""

    def unpop(self, entry: QueueEntry) -> None:
        """Undo the last ``pop`` (no consumer could take the entry after all)."""

    def requeue(self, entry: QueueEntry) -> None:
        """A delivered entry comes back, to its original place."""

    def after_change(self) -> None:
        """Entries came or went: expire the head, apply drop-head (featured stores)."""

    def purge(self) -> int:
        """Drop every ready entry (and its stored copy); returns how many."""

    @property
    def paged_out(self) -> int:
        """Ready entries only the disk store holds (the paged-out tails)."""

    def memory_bytes(self) -> int:
        """Body bytes of the ready entries in memory (the management plane's
        ``message_bytes_ram``; the plain store counts them when asked, see ``queue_bytes``)."""

    @property
    def paged_out_bytes(self) -> int:
        """Body bytes of the paged-out tails; a tail whose bytes are not known counts 0."""

    def segments(self, visit: int) -> Iterator[QueueEntry | Tail]:
        """The ready entries in delivery order (at most ``visit`` of those in memory), a
        paged-out tail standing for its entries (``browse.walk`` reads them)."""

    def tail_of(self, entry: QueueEntry | StoredEntry) -> Tail:
        """The tail holding a paged-out entry (to take it out by position)."""

    def take(self, seqs: Collection[int]) -> list[QueueEntry]:
        """Remove the in-memory ready entries with these sequence numbers (the management
        operations: ``broker/queue_messages.py``); the caller removes their stored copies."""

    def page_out(self, keep: int) -> None:
        """Memory is short: keep at most ``keep`` fresh entries in memory, moving the newest
        of the others (those on disk already) to the tail (``paging.py``)."""

    def recover(self, count: int, first_seq: int, size: int | None = None) -> None:
        """After a restart: ``count`` stored entries from ``first_seq`` on are ready, with
        ``size`` body bytes (None: not known)."""

    def forget(self, start: int, end: int) -> int:
        """A store write failed: entries with ``start <= seq < end`` were never stored."""

    def close(self) -> None:
        """The queue is deleted: cancel timers, and refer to a ``deleted.DeletedOwner``
        instead of it."""


class Tail:
    """The paged-out part of a durable queue (see the module docstring)."""

    __slots__ = ("_owner", "bytes", "count", "first", "removed", "waiting")

    def __init__(self, owner: Owner) -> None:
        self._owner = owner
        self.count = 0
        self.first = 0
        self.waiting = False  # a short read waits for the next commit
        self.removed: set[int] = set()  # taken out of the middle, not yet passed by a read
        # Body bytes of the tail's entries; None when not known (a restart on a store that
        # kept no byte totals, a failed write), until the tail is next empty: ``byte_total``
        # then counts them from the store (a byte limit only: it reads the whole tail).
        self.bytes: int | None = 0

    def detach(self, stand_in: Owner) -> None:
        """Its queue is deleted: refer to ``stand_in`` instead (``deleted.DeletedOwner``)."""
        self._owner = stand_in

    def take(self, seq: int, size: int) -> None:
        """Take the entry ``seq`` (read by the caller, at or after ``first``) out of the tail;
        its removal from the store is the caller's (in the same turn as what replaces it)."""
        self.removed.add(seq)
        self.count -= 1
        if self.bytes is not None:
            self.bytes -= size

    def untake(self, seq: int, size: int) -> None:
        """Put back an entry ``take`` took (its removal was not recorded)."""
        self.removed.discard(seq)
        self.count += 1
        if self.bytes is not None:
            self.bytes += size

    def append(self, seq: int, size: int) -> None:
        if not self.count:
            self.first = seq
            self.bytes = 0  # an empty tail's bytes are known
        self.count += 1
        if self.bytes is not None:
            self.bytes += size

    def prepend(self, first: int, count: int, size: int) -> None:
        """``count`` entries from ``first`` on, all before the tail's, leave memory for it."""
        if not self.count:
            self.bytes = 0
        self.first = first
        self.count += count
        if self.bytes is not None:
            self.bytes += size

    def byte_total(self) -> int:
        """Body bytes of the tail (read from the store, in batches, when not known)."""
        if self.bytes is None:
            owner = self._owner
            log = owner.log
            assert log is not None  # only durable queues have a tail
            total, first, left = 0, self.first, self.count
            while left > 0:
                batch = log.read_queue(owner.qid, first, min(left, 2_000))
                if not batch:
                    break
                first = batch[-1].seq + 1
                kept = [e for e in batch if e.seq not in self.removed]
                total += sum(len(e.message.body) for e in kept)
                left -= len(kept)
            self.bytes = total
        return self.bytes

    def walk(self, visit: int, batch: int) -> Iterator[StoredEntry]:
        """The first ``visit`` committed entries, read ``batch`` at a time; changes nothing."""
        log = self._owner.log
        if log is None:
            return
        qid = self._owner.qid
        first, left = self.first, min(self.count, visit)
        while left > 0:
            stored = log.read_queue(qid, first, min(batch, left))
            if not stored:
                return  # the rest is not committed yet
            first = stored[-1].seq + 1
            if self.removed:  # taken out by position, not yet forgotten by the store
                stored = [e for e in stored if e.seq not in self.removed]
            yield from stored
            left -= len(stored)

    def read(self, want: int) -> list[StoredEntry]:
        """Up to ``want`` committed entries from the front of the tail (removed from it)."""
        owner = self._owner
        log = owner.log
        assert log is not None  # only durable queues have a tail
        stored: list[StoredEntry] = log.read_queue(owner.qid, self.first, want)
        short = len(stored) < want
        if stored:
            self.first = stored[-1].seq + 1
            if self.removed:
                stored = [e for e in stored if e.seq not in self.removed]
                self.removed = {seq for seq in self.removed if seq >= self.first}
            self.count -= len(stored)
            if self.bytes is not None:
                self.bytes -= sum(map(len, map(_message_of, stored)))  # len: its body's
            elif not self.count:
                self.bytes = 0
        if self.count and short and not self.waiting:
            self.waiting = True
            log.after_commit(self._committed)
        return stored

    def _committed(self, ok: bool) -> None:
        self.waiting = False
        if not self._owner.deleted:
            self._owner.wake()

    def forget(self, start: int, end: int) -> int:
        """Entries of a failed write: the tail holds consecutive sequence numbers."""
        lost = max(0, min(end, self.first + self.count) - max(start, self.first))
        self.count -= lost
        if lost:
            self.bytes = None if self.count else 0  # the lost entries' sizes are not known
        return lost


def page_out_fresh(fresh: deque[QueueEntry], tail: Tail, keep: int) -> int:
    """Move the newest ``fresh`` entries beyond the first ``keep`` to the front of ``tail``
    (memory pressure, ``paging.py``); returns their body bytes. Only entries on disk can
    go: it stops at a transient message (in memory only), which keeps the older ones too,
    since the tail is every stored entry from its first on."""
    size = moved = first = 0
    while len(fresh) > keep and fresh[-1].stored:
        entry = fresh.pop()
        size += len(entry.message.body)
        moved += 1
        first = entry.seq
    if moved:
        tail.prepend(first, moved, size)
    return size


class SeqIndex:
    """Ascending sequence numbers in about 4 bytes each: chunks of offsets from a base."""

    __slots__ = ("_chunks", "_len", "_pos")
    CHUNK = 8_192

    def __init__(self) -> None:
        self._chunks: deque[tuple[int, array[int]]] = deque()
        self._pos = 0  # consumed offsets of the first chunk
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def append(self, seq: int) -> None:
        chunks = self._chunks
        if chunks:
            base, offsets = chunks[-1]
            offset = seq - base
            if offset <= 0xFFFF_FFFF and len(offsets) < self.CHUNK:
                offsets.append(offset)
                self._len += 1
                return
        chunks.append((seq, array("I", [0])))
        self._len += 1

    def __iter__(self) -> Iterator[int]:
        pos = self._pos
        for base, offsets in self._chunks:
            for offset in islice(offsets, pos, None):
                yield base + offset
            pos = 0

    def first(self, n: int) -> list[int]:
        return list(islice(self, n))

    def drop(self, n: int) -> None:
        """Forget the first ``n`` sequence numbers."""
        n = min(n, self._len)
        self._len -= n
        chunks = self._chunks
        while n:
            left = len(chunks[0][1]) - self._pos
            if n < left:
                self._pos += n
                return
            n -= left
            chunks.popleft()
            self._pos = 0

    def discard(self, start: int, end: int, mask: int = -1) -> list[int]:
        """Remove and return the sequence numbers whose ``seq & mask`` is in ``[start, end)``
        (a failed write)."""
        kept: list[int] = []
        gone: list[int] = []
        for seq in self:
            (gone if start <= seq & mask < end else kept).append(seq)
        if gone:
            self._chunks, self._pos, self._len = deque(), 0, 0
            for seq in kept:
                self.append(seq)
        return gone


class IndexedTail(Tail):
    """A tail whose entries are not consecutive in the queue's sequence: one priority level
    of a priority queue (``priority_store.py``). It keeps their sequence numbers
    (``SeqIndex``, about 4 bytes an entry) and reads them from the store by number."""

    __slots__ = ("index",)

    def __init__(self, owner: Owner) -> None:
        super().__init__(owner)
        self.index = SeqIndex()

    def append(self, seq: int, size: int) -> None:
        super().append(seq, size)
        self.index.append(seq)

    def _read(self, seqs: Sequence[int]) -> list[StoredEntry]:
        log = self._owner.log
        assert log is not None  # only durable queues have a tail
        removed = self.removed
        return log.read_entries(self._owner.qid, [s for s in seqs if s not in removed])

    def walk(self, visit: int, batch: int) -> Iterator[StoredEntry]:
        left = min(self.count, visit)
        seqs = iter(self.index)
        while left > 0:
            wanted = [s for s in islice(seqs, batch) if s not in self.removed][:left]
            if not wanted:
                return
            stored = self._read(wanted)
            yield from stored
            if len(stored) < len(wanted):
                return  # the rest is not committed yet
            left -= len(stored)

    def read(self, want: int) -> list[StoredEntry]:
        log = self._owner.log
        assert log is not None
        index, removed = self.index, self.removed
        peek = index.first(want + len(removed))
        stored = self._read(peek)[:want]
        # Committed entries are a prefix of the live ones: consume up to the last one read,
        # and the removed ones met on the way.
        consumed = (bisect_right(peek, stored[-1].seq) if stored
                    else next((i for i, s in enumerate(peek) if s not in removed), len(peek)))
        if removed:
            removed.difference_update(peek[:consumed])
        index.drop(consumed)
        self.first = next(iter(index), 0)
        self.count -= len(stored)
        if self.bytes is not None:
            self.bytes -= sum(len(e.message.body) for e in stored)
        elif not self.count:
            self.bytes = 0
        if self.count and len(stored) < want and not self.waiting:
            self.waiting = True
            log.after_commit(self._committed)
        return stored

    def byte_total(self) -> int:
        if self.bytes is None:
            seqs, total = iter(self.index), 0
            while batch := list(islice(seqs, 2_000)):
                total += sum(len(e.message.body) for e in self._read(batch))
            self.bytes = total
        return self.bytes

    def forget(self, start: int, end: int) -> int:
        gone = self.index.discard(start, end, SEQ_MASK)
        lost = len([s for s in gone if s not in self.removed])
        self.removed.difference_update(gone)
        self.count -= lost
        self.first = next(iter(self.index), 0)
        if lost:
            self.bytes = None if self.count else 0  # the lost entries' sizes are not known
        return lost


def fifo_segments(returned: list[QueueEntry], fresh: deque[QueueEntry], tail: Tail,
                  visit: int) -> Iterator[QueueEntry | Tail]:
    """``ReadyStore.segments`` of the first-in-first-out stores (plain, featured)."""
    if returned:
        yield from heapq.nsmallest(visit, returned) if len(returned) > visit else sorted(returned)
    yield from islice(fresh, visit)
    if tail.count:
        yield tail


def purge_ready(owner: Owner, fresh: deque[QueueEntry], returned: list[QueueEntry],
                tail: Tail) -> None:
    """Forget every ready entry, in memory and in the store (both ready stores' ``purge``).
    A deleted queue's purge records nothing: the store writes off all its entries in
    slices after the delete commits (``persistence/lmdb_drops.py``)."""
    log = owner.log
    if log is not None:
        if not owner.deleted:
            for entries in (fresh, returned):
                for entry in entries:
                    if entry.stored:
                        log.remove(owner.qid, entry.seq, entry.message)
            if tail.count:
                log.purge(owner.qid, tail.first)
        tail.count = 0
        tail.removed.clear()
        tail.bytes = 0
    fresh.clear()
    returned.clear()


def take_entries(fresh: deque[QueueEntry], returned: list[QueueEntry], seqs: Collection[int]
                 ) -> tuple[deque[QueueEntry], list[QueueEntry], list[QueueEntry]]:
    """``fresh`` and ``returned`` without the entries numbered ``seqs``, and those entries
    (both ready stores' ``take``; O(entries in memory), a management operation only)."""
    wanted = set(seqs)
    taken = [e for e in returned if e.seq in wanted]
    taken.extend(e for e in fresh if e.seq in wanted)
    if not taken:
        return fresh, returned, taken
    kept = [e for e in returned if e.seq not in wanted]
    heapq.heapify(kept)
    return deque(e for e in fresh if e.seq not in wanted), kept, taken
