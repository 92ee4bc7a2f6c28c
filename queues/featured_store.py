"""The ready store of a queue with message TTL or length limits.

Theory of operation
-------------------
The same order as the plain store (a deque of fresh entries, a heap of
requeued ones: a requeued entry goes back to its original place), but every
entry is looked at: its expiry is fixed on enqueue (``ttl.py``), the body
bytes of ready entries are counted for ``x-max-length-bytes``, and the limits
are applied (``limits.py``): ``reject-publish`` refuses before enqueueing,
``drop-head`` trims after every change (``after_change``).

Expiry is lazy, at the head only, as in RabbitMQ's classic queues: ``pop``
drops expired entries it meets, ``after_change`` drops the expired head run
and arms one timer (``ttl.ExpiryTimer``) for the next head's expiry, so that a
queue without consumers expires its messages too. The entry being published
is exempt until its publish completes: a TTL of 0 delivers it if a consumer
can take it at once and expires it otherwise (RabbitMQ's replacement for
``immediate``).

A durable featured store pages like the plain one: at most ``page_high`` ready
entries in memory (``paging.py``), the rest only in the disk store (its ``Tail``), read back
``PAGE_BATCH`` at a time as the head drains. That is enough for TTL and limits
because both act at the head only: expiry is lazy there (a paged entry keeps its
absolute expiry, stored with it), ``drop-head`` drops from the head (reading the
tail in when the head runs dry), and the limits need only the totals, the tail's
count and body bytes (``Tail.byte_total``). A plain store that becomes featured
(its first message with an expiration) hands over its tail as it is. A priority
store pages one tail per priority level (``priority_store.py``).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Collection, Iterator

from leveret.model.message import FLAG_EXPIRATION, Message
from leveret.persistence.batch import SEQ_MASK
from leveret.queues import dead_letter, limits, plain_store, ttl
from leveret.queues.deleted import DeletedOwner
from leveret.queues.entry import PublishResult, QueueEntry
from leveret.queues.ready import (
    Owner,
    Tail,
    fifo_segments,
    page_out_fresh,
    purge_ready,
    take_entries,
)

_EXPIRATION_BIT = FLAG_EXPIRATION >> 8
_ACCEPTED = PublishResult.ACCEPTED
_HELD = PublishResult.HELD
_REFUSED = PublishResult.REFUSED


def _expired_nothing() -> None:
    """A deleted queue's expiry timer (``FeaturedStore.close``)."""


class FeaturedStore:
    expires = True

    __slots__ = ("_exempt", "_expiry", "_owner", "bytes", "fresh", "returned", "tail")

    def __init__(self, owner: Owner, entries: list[QueueEntry] | None = None,
                 tail: Tail | None = None) -> None:
        self._owner = owner
        self.fresh: deque[QueueEntry] = deque()
        self.returned: list[QueueEntry] = []
        self.bytes = 0  # body bytes of the ready entries in memory
        self.tail = tail or Tail(owner)
        self._expiry = ttl.ExpiryTimer(owner.time, self._on_timer)
        self._exempt: QueueEntry | None = None
        for entry in entries or ():
            self._push(entry, False)
        if self.tail.count and not self.fresh and not self.returned:
            self._refill()

    def __len__(self) -> int:
        return len(self.fresh) + len(self.returned) + self.tail.count

    @property
    def backlog(self) -> int:
        return len(self.fresh) + self.tail.count

    @property
    def paged_out(self) -> int:
        return self.tail.count

    def memory_bytes(self) -> int:
        return self.bytes

    @property
    def paged_out_bytes(self) -> int:
        tail = self.tail
        return (tail.bytes or 0) if tail.count else 0

    def segments(self, visit: int) -> Iterator[QueueEntry | Tail]:
        return fifo_segments(self.returned, self.fresh, self.tail, visit)

    def tail_of(self, entry: object) -> Tail:
        return self.tail

    # -- the containers (PriorityStore overrides these) -------------------------------

    def _new_entry(self, seq: int, message: Message) -> QueueEntry:
        return QueueEntry(seq, message)

    def _push(self, entry: QueueEntry, requeued: bool) -> None:
        self.bytes += len(entry.message.body)
        if requeued:
            heapq.heappush(self.returned, entry)
        else:
            self.fresh.append(entry)

    def _page_to(self, entry: QueueEntry) -> Tail | None:
        """The tail a new entry of a durable queue goes to, or None to keep it in memory."""
        tail = self.tail
        return tail if tail.count or len(self.fresh) >= self._owner.page_high else None

    def _cluster(self, entry: QueueEntry) -> int:
        """Where the store keeps the entry's message among others (``Recorder.enqueue``)."""
        return 0

    def _head(self) -> QueueEntry | None:
        if not self.fresh and not self.returned and self.tail.count:
            self._refill()
        if self.returned:
            return self.returned[0]
        return self.fresh[0] if self.fresh else None

    def _pop_head(self) -> QueueEntry | None:
        if not self.fresh and not self.returned and self.tail.count:
            self._refill()
        if self.returned:
            entry = heapq.heappop(self.returned)
        elif self.fresh:
            entry = self.fresh.popleft()
        else:
            return None
        self.bytes -= len(entry.message.body)
        return entry

    # -- ReadyStore -------------------------------------------------------------------

    def enqueue(self, seq: int, message: Message) -> PublishResult:
        owner = self._owner
        settings = owner.settings
        if limits.refuses(settings, len(self), self._bytes(), len(message.body)):
            owner.refuse(message)
            return _REFUSED
        entry = self._new_entry(seq, message)
        props = message.raw_properties
        expiration = message.expiration if props and props[0] & _EXPIRATION_BIT else -1
        if expiration >= 0 or settings.message_ttl is not None:
            entry.expires_at = ttl.expiry_of(settings, expiration, ttl.now_ms(owner.time))
        log = owner.log
        tail = self._page_to(entry) if log is not None else None
        if tail is not None:
            # Paging: the entry lives only in the store until the head needs it.
            assert log is not None
            tail.append(seq, len(message.body))
            log.enqueue(owner.qid, seq, message, not message.persistent, entry.expires_at or 0,
                        self._cluster(entry))
            owner.written(seq & SEQ_MASK)  # the queue's counter (priority: no level)
            return _HELD if message.persistent else _ACCEPTED
        result = _ACCEPTED
        if log is not None and message.persistent:
            entry.stored = True
            log.enqueue(owner.qid, seq, message, False, entry.expires_at or 0,
                        self._cluster(entry))
            owner.written(seq & SEQ_MASK)  # the queue's counter (priority: no level)
            result = _HELD
        self._push(entry, False)
        self._exempt = entry
        return result

    def pop(self) -> QueueEntry | None:
        now = ttl.now_ms(self._owner.time)
        exempt = self._exempt
        while True:
            entry = self._pop_head()
            if entry is None or entry is exempt or not ttl.is_expired(entry.expires_at, now):
                return entry
            self._owner.drop(entry, dead_letter.EXPIRED)

    def requeue(self, entry: QueueEntry) -> None:
        self._push(entry, True)

    unpop = requeue  # the entry just popped is older than every fresh one: the heap's top

    def after_change(self) -> None:
        self._exempt = None
        self._expire_head()
        settings = self._owner.settings
        dropped = False
        while limits.drops_head(settings, len(self), self._bytes()):
            entry = self._pop_head()
            if entry is None:
                break
            self._owner.drop(entry, dead_letter.MAXLEN)
            dropped = True
        if dropped:
            self._expire_head()

    def _expire_head(self) -> None:
        now = ttl.now_ms(self._owner.time)
        while True:
            head = self._head()
            if head is None or head.expires_at is None:
                return
            if now < head.expires_at:
                self._expiry.arm(head.expires_at)
                return
            self._pop_head()
            self._owner.drop(head, dead_letter.EXPIRED)

    def _on_timer(self) -> None:
        if not self._owner.deleted:
            self._expire_head()

    def _refill(self) -> None:
        """Read the next committed tail entries into the head."""
        self._refill_from(self.tail, max(plain_store.PAGE_HIGH - len(self.fresh), 1))

    def _refill_from(self, tail: Tail, room: int) -> bool:
        """Read up to ``room`` (at most PAGE_BATCH) committed entries of ``tail`` into memory;
        False if none came (not committed yet)."""
        stored = tail.read(min(plain_store.PAGE_BATCH, room, tail.count))
        for item in stored:
            entry = self._new_entry(item.seq, item.message)
            entry.delivery_count = item.delivery_count
            entry.stored = True
            if item.expires_at:
                entry.expires_at = item.expires_at
            self._push(entry, False)
        return bool(stored)

    def _bytes(self) -> int:
        """Body bytes of every ready entry, in memory and paged out, when a byte limit needs
        them (0 otherwise: counting a tail after a restart reads it from the store)."""
        if self._owner.settings.max_length_bytes is None:
            return 0
        tail = self.tail
        return self.bytes + tail.byte_total() if tail.count else self.bytes

    def purge(self) -> int:
        count = len(self)
        purge_ready(self._owner, self.fresh, self.returned, self.tail)
        self.bytes = 0
        self._expiry.cancel()
        return count

    def take(self, seqs: Collection[int]) -> list[QueueEntry]:
        self.fresh, self.returned, taken = take_entries(self.fresh, self.returned, seqs)
        self.bytes -= sum(len(e.message.body) for e in taken)
        return taken

    def page_out(self, keep: int) -> None:
        if self._owner.log is not None:
            self.bytes -= page_out_fresh(self.fresh, self.tail, keep)

    def recover(self, count: int, first_seq: int, size: int | None = None) -> None:
        self.tail.count = count
        self.tail.first = first_seq
        # The store's total; None (a store of format 2): counted when a byte limit needs it.
        self.tail.bytes = size
        if count:
            self._refill()
            head = self._head()
            if head is not None and head.expires_at is not None:
                # Not now: the dead-letter exchange's bindings are not recovered yet.
                self._expiry.arm(head.expires_at)

    def forget(self, start: int, end: int) -> int:
        def failed(e: QueueEntry) -> bool:
            return e.stored and start <= e.seq & SEQ_MASK < end  # priority: level cluster

        lost = self.tail.forget(start, end)
        for name in ("fresh", "returned"):
            entries = getattr(self, name)
            gone = [e for e in entries if failed(e)]
            if gone:
                kept = [e for e in entries if not failed(e)]
                self.bytes -= sum(len(e.message.body) for e in gone)
                lost += len(gone)
                if name == "fresh":
                    self.fresh = deque(kept)
                else:
                    heapq.heapify(kept)
                    self.returned = kept
        return lost

    def close(self) -> None:
        self._expiry.cancel()
        self._owner = DeletedOwner(self._owner)
        self.tail.detach(self._owner)
        # The timer's callback is a method of this store: a cycle of its own.
        self._expiry = ttl.ExpiryTimer(self._owner.time, _expired_nothing)
