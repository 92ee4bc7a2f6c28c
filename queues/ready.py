"""What a queue's ready store is, and the paged-out tail the stores share.

Theory of operation
-------------------
A queue keeps its *ready* messages (enqueued, not delivered or requeued since)
in one store, chosen once from its settings (``Queue._choose_store``):

* ``PlainStore`` (``plain_store.py``): no per-message features; a durable
  queue pages its tail out to the disk store.
* ``FeaturedStore`` (``featured_store.py``): message TTL and length limits;
  entries stay in memory (the head and the byte count must be known).
* ``PriorityStore`` (``priority_store.py``): ``x-max-priority``; a featured
  store whose entries are ordered by priority first.

A plain queue switches once to a featured store when it first meets a message
with an ``expiration`` (or a policy gives it a TTL or a limit), as LavinMQ's
queue flavours are chosen once instead of testing a flag on every call.

All stores answer the ``ReadyStore`` protocol; the queue's single dispatch
loop calls ``pop`` only. A store reaches what it needs of its queue through
``Owner``: the group commit and queue id for durable entries, the settings
and clocks for TTL and limits, and ``drop`` to dead-letter what it discards.

``Tail`` is the part of a durable queue that lives only in the disk store:
``count`` entries from sequence ``first`` on, read back in order as the
in-memory head drains. The disk store only returns committed entries, so a
read that comes up short waits for the next commit and then wakes the queue.
Single entries can be taken out of the middle of the tail (the console's
redrive, move and delete by position): they are set aside in ``removed`` until
reads have passed them, since the disk store forgets them only at the next
commit and a read before it would still return them.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Collection
from typing import TYPE_CHECKING, Protocol

from leveret.queues.host import QueueLog

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

    def take(self, seqs: Collection[int]) -> list[QueueEntry]:
        """Remove the in-memory ready entries with these sequence numbers (the management
        operations: ``broker/queue_messages.py``); the caller removes their stored copies."""

    def recover(self, count: int, first_seq: int) -> None:
        """After a restart: ``count`` stored entries from ``first_seq`` on are ready."""

    def forget(self, start: int, end: int) -> int:
        """A store write failed: entries with ``start <= seq < end`` were never stored."""

    def close(self) -> None:
        """The queue is deleted: cancel timers."""


class Tail:
    """The paged-out part of a durable queue (see the module docstring)."""

    __slots__ = ("_owner", "bytes", "count", "first", "removed", "waiting")

    def __init__(self, owner: Owner) -> None:
        self._owner = owner
        self.count = 0
        self.first = 0
        self.waiting = False  # a short read waits for the next commit
        self.removed: set[int] = set()  # taken out of the middle, not yet passed by a read
        # Body bytes of the tail's entries; None when not known (after a restart or a failed
        # write): ``byte_total`` then counts them once from the store.
        self.bytes: int | None = 0

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
        self.count += 1
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
                self.bytes -= sum(len(e.message.body) for e in stored)
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
            self.bytes = None
        return lost


def purge_ready(owner: Owner, fresh: deque[QueueEntry], returned: list[QueueEntry],
                tail: Tail) -> None:
    """Forget every ready entry, in memory and in the store (both ready stores' ``purge``)."""
    log = owner.log
    if log is not None:
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
