"""A classic queue: ready messages in publication order, and consumer dispatch.

Theory of operation
-------------------
Every message that enters the queue gets a queue-local sequence number.
Ready messages live in two places: ``_fresh``, a deque of never-delivered
entries in sequence order, and ``_returned``, a heap of requeued entries.
Delivery only ever takes from the head, so every requeued entry is older than
every fresh one: taking the heap first (smallest sequence first) and then the
deque puts a requeued message back "in its original position", as RabbitMQ
does since 2.7.

Dispatch is synchronous: a publish that finds a consumer with spare prefetch
is written to that consumer's channel in the same call, with no task or
future per message.

Durable queues record what must survive a restart through ``log`` (the
broker's group commit): persistent messages when they enter, their delivery
counts, and their removal. A durable queue keeps at most ``PAGE_HIGH`` ready
entries in memory; beyond that new entries exist only in the store (the
"tail", counted by ``_tail`` and starting at sequence ``_tail_from``) and are
read back in order, in batches, as the head drains. The store only returns
committed entries, so a refill that comes up short waits for the next commit.
A restarted queue starts with everything in its tail: startup reads nothing.

Flow control: a queue with consumers that falls behind (more than
``FLOW_HIGH`` ready messages) makes the connections publishing into it stop
reading (they join ``flow_waiters``) until it is back under ``FLOW_LOW``.
That is what RabbitMQ's credit flow achieves: publishers go at the pace of
the consumers instead of filling memory. A queue without consumers never
throttles: building a backlog there is legitimate.

Consumers are kept in priority order (``x-priority``,
highest first); within one priority the consumer that just received a message
moves behind its peers, which gives RabbitMQ's round-robin.

Queue features live in their own modules (``ttl``, ``dead_letter``,
``limits``, ``priority``) and read ``settings`` only. A queue using message
TTL, a length limit or priorities is *featured* (``_featured``, derived from
its settings, or set by the first message with an ``expiration``): its
publish, dispatch and basic.get go through slower paths that look at each
entry (expiry at the head, byte accounting, trimming), and it is not paged
(its ready entries stay in memory: the head and the byte count must be
known). Plain queues pay one flag test per publish and dispatch.
Single-active-consumer keeps the waiting consumers in ``_standby``: only
``consumers[0]`` is ever dispatched to.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING, Any

from leveret.queues import dead_letter, limits, priority, ttl
from leveret.model.message import FLAG_EXPIRATION, Message
from leveret.queues.settings import QueueSettings, from_arguments

if TYPE_CHECKING:
    from leveret.queues.consumer import Consumer

# Ready entries a durable queue holds in memory before paging new ones to the store only,
# and how many it reads back at once when its in-memory head runs dry.
PAGE_HIGH = 10_000
PAGE_BATCH = 2_000

# Ready messages (with consumers attached) above which publishers into the queue are paused,
# and below which they resume. Big enough to keep consumers' prefetch windows full.
FLOW_HIGH = 20_000
FLOW_LOW = 10_000

# What Queue.publish returns when the queue refused the message (reject-publish overflow).
REFUSED = 2
# High byte of the property flags: the expiration bit (a cheap test on every publish).
_EXPIRATION_BIT = FLAG_EXPIRATION >> 8


class QueueEntry:
    """A message's place in one queue; ``delivery_count`` > 0 means redelivered."""

    __slots__ = ("seq", "message", "delivery_count", "stored", "expires_at")

    def __init__(self, seq: int, message: Message) -> None:
        self.seq = seq
        self.message = message
        self.delivery_count = 0
        self.stored = False  # has an entry in the store that must be removed when settled
        self.expires_at: int | None = None  # wall-clock ms (ttl.py)

    def __lt__(self, other: QueueEntry) -> bool:
        return self.seq < other.seq


class PriorityEntry(QueueEntry):
    """An entry of a priority queue: heap order is priority first (``priority.py``)."""

    __slots__ = ("priority",)

    def __init__(self, seq: int, message: Message, max_priority: int) -> None:
        super().__init__(seq, message)
        self.priority = priority.effective_priority(message.priority, max_priority)

    __lt__ = priority.higher_first  # type: ignore[assignment]


class Queue:
    """One queue of one virtual host."""

    __slots__ = (
        "vhost", "name", "durable", "exclusive_owner", "auto_delete", "arguments",
        "_fresh", "_returned", "_next_seq", "consumers", "unacked", "had_consumer",
        "exclusive_consumer", "deleted", "_dispatching", "bound_exchanges", "flow_waiters",
        "qid", "log", "_tail", "_tail_from", "_refill_waiting", "settings",
        "time", "_featured", "_ready_bytes", "_expiry", "_lease", "_standby",
        "__weakref__",
    )

    def __init__(
        self,
        vhost: Any,
        name: str,
        durable: bool = False,
        exclusive_owner: object | None = None,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        self.vhost = vhost
        self.name = name
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments = arguments or {}
        self.settings: QueueSettings = from_arguments(self.arguments)
        self._fresh: deque[QueueEntry] = deque()
        self._returned: list[QueueEntry] = []
        self._next_seq = 0
        self.consumers: list[Consumer] = []
        self.unacked = 0
        self.had_consumer = False
        self.exclusive_consumer = False
        self.deleted = False
        self._dispatching = False
        # Exchanges holding a binding to this queue: unbound when it is deleted.
        self.bound_exchanges: set[Any] = set()
        # Connections paused because this queue fell behind its consumers.
        self.flow_waiters: set[Any] = set()
        # Durability: set by the vhost for durable queues (qid from the store).
        self.qid = 0
        self.log: Any = None
        self._tail = 0
        self._tail_from = 0
        self._refill_waiting = False
        # Features (see the module docstring).
        self.time = ttl.timekeeping_of(vhost)
        self._featured = False
        self._ready_bytes = 0  # body bytes of ready entries, kept while featured
        self._expiry = ttl.ExpiryTimer(self.time, self._on_expiry_timer)
        self._lease: ttl.Lease | None = None
        self._standby: list[Consumer] = []  # single-active-consumer: waiting consumers
        self._configure(None)

    def __repr__(self) -> str:
        return f"<Queue {self.name!r} ready={self.message_count}>"

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    @property
    def message_count(self) -> int:
        """Ready messages (what queue.declare-ok and basic.get-ok report)."""
        return len(self._fresh) + len(self._returned) + self._tail

    def recover(self, count: int, first_seq: int, next_seq: int) -> None:
        """A durable queue after a restart: all its stored entries are ready, still on disk."""
        self._tail = count
        self._tail_from = first_seq
        self._next_seq = next_seq
        if self._featured and count:
            self._refill()
            head = self._head()
            if head is not None and head.expires_at is not None:
                # Not now: the dead-letter exchange's bindings are not recovered yet.
                self._expiry.arm(head.expires_at)

    def apply_settings(self, settings: QueueSettings) -> None:
        """New effective settings (a policy changed); features pick them up from here."""
        old, self.settings = self.settings, settings
        self._configure(old)

    def _configure(self, old: QueueSettings | None) -> None:
        """React to (new) settings: feature flags, lease, an immediate trim."""
        s = self.settings
        if (s.message_ttl is not None or limits.has_limit(s) or s.max_priority) and not self._featured:
            self._become_featured()
        if old is None or old.expires != s.expires:
            if self._lease is not None:
                self._lease.cancel()
                self._lease = None
            if s.expires is not None:
                self._lease = ttl.Lease(self.time, s.expires, self._on_lease_expired,
                                        self._in_use)
        if old is not None and self._featured:
            self._expire_head()
            self._trim()

    def _become_featured(self) -> None:
        """Switch to the per-entry paths: load the paged tail, count ready bytes."""
        self._featured = True
        if self._tail:
            self._refill()
        self._ready_bytes = (sum(len(e.message.body) for e in self._fresh)
                             + sum(len(e.message.body) for e in self._returned))

    @property
    def consumer_count(self) -> int:
        return len(self.consumers) + len(self._standby)

    def all_consumers(self) -> list[Consumer]:
        """Active and (single-active-consumer) standby consumers."""
        return [*self.consumers, *self._standby]

    # -- messages -----------------------------------------------------------

    def publish(self, message: Message) -> bool | int:
        """Append ``message`` and hand it to a consumer if one has room.

        Returns True when a durable write was recorded for a persistent message:
        its publisher confirm must wait for the commit; ``REFUSED`` when the queue
        refused it (``reject-publish`` overflow: the publisher gets a nack).
        """
        props = message.raw_properties
        if self._featured or (props and props[0] & _EXPIRATION_BIT):
            return self._publish_featured(message)
        seq = self._next_seq
        self._next_seq = seq + 1
        log = self.log
        if log is None:
            self._fresh.append(QueueEntry(seq, message))
            if self.consumers and not self._dispatching:
                self.dispatch()
            return False
        persistent = message.persistent
        if self._tail or len(self._fresh) >= PAGE_HIGH:
            # Paging: the entry lives only in the store until the head needs it.
            if not self._tail:
                self._tail_from = seq
            self._tail += 1
            log.enqueue(self.qid, seq, message, not persistent)
            return persistent
        entry = QueueEntry(seq, message)
        if persistent:
            entry.stored = True
            log.enqueue(self.qid, seq, message)
        self._fresh.append(entry)
        if self.consumers and not self._dispatching:
            self.dispatch()
        return persistent

    def _refill(self) -> None:
        """Read the next committed tail entries into the head."""
        featured = self._featured
        # A featured queue is not paged: it reads everything committed.
        want = self._tail if featured else min(PAGE_HIGH - len(self._fresh), PAGE_BATCH, self._tail)
        if want <= 0:
            return
        stored = self.log.read_queue(self.qid, self._tail_from, want)
        fresh = self._fresh
        converted = False
        for item in stored:
            if featured:
                entry = self._new_entry(item.seq, item.message)
            else:
                entry = QueueEntry(item.seq, item.message)
            entry.delivery_count = item.delivery_count
            entry.stored = True
            if item.expires_at:
                entry.expires_at = item.expires_at
                converted = not featured
            if featured:
                self._push_ready(entry, False)
            else:
                fresh.append(entry)
        if stored:
            self._tail -= len(stored)
            self._tail_from = stored[-1].seq + 1
        if converted:
            # A message with an expiration in a queue without TTL: per-entry paths from now.
            self._become_featured()
        if self._tail and len(stored) < want and not self._refill_waiting:
            # The rest is not committed yet: look again once it is.
            self._refill_waiting = True
            self.log.after_commit(self._after_commit)

    def _after_commit(self, ok: bool) -> None:
        self._refill_waiting = False
        if self.deleted:
            return
        if self.consumers:
            self.dispatch()

    def note_delivered(self, entry: QueueEntry) -> None:
        """Persist the delivery count of a stored entry delivered for manual ack."""
        self.log.mark_delivered(self.qid, entry.seq, entry.message, entry.delivery_count)

    def behind(self) -> bool:
        """Consumers attached but more than FLOW_HIGH ready: publishers should wait."""
        return bool(self.consumers) and len(self._fresh) + self._tail > FLOW_HIGH

    def release_flow(self, force: bool = False) -> None:
        """Resume paused publishers once the backlog is under FLOW_LOW (or always, if forced)."""
        if self.flow_waiters and (force or not self.consumers
                                  or len(self._fresh) + self._tail < FLOW_LOW):
            waiters, self.flow_waiters = self.flow_waiters, set()
            for conn in waiters:
                conn.flow_release(self)

    def take(self) -> QueueEntry | None:
        """Remove and return the head entry (basic.get), or None."""
        if self._lease is not None:
            self._lease.renew()
        if self._featured:
            entry = self._pop_ready(ttl.now_ms(self.time))
            self._after_change()
            return entry
        if self._tail and not self._fresh:
            self._refill()
        if self._returned:
            return heapq.heappop(self._returned)
        if self._fresh:
            return self._fresh.popleft()
        return None

    def requeue(self, entry: QueueEntry) -> None:
        """Put a delivered-but-unacked entry back in its original position."""
        self.unacked -= 1
        if self.deleted:
            return
        limit = self.settings.delivery_limit
        if limit is not None and entry.delivery_count > limit:
            self._drop(entry, dead_letter.DELIVERY_LIMIT)
            return
        if self._featured:
            self._push_ready(entry, True)
            self._after_change()
            return
        heapq.heappush(self._returned, entry)

    def reject(self, entry: QueueEntry) -> None:
        """A delivered entry was rejected without requeue: dead-letter it (if configured)."""
        self.unacked -= 1
        if not self.deleted:
            self._drop(entry, dead_letter.REJECTED)

    def settle(self, entry: QueueEntry) -> None:
        """A delivered entry was acked (or rejected without requeue): it is gone."""
        self.unacked -= 1
        if entry.stored and not self.deleted:
            self.log.remove(self.qid, entry.seq, entry.message)

    def purge(self) -> int:
        """Drop every ready message; unacked ones are untouched (as RabbitMQ)."""
        count = self.message_count
        log = self.log
        if log is not None:
            for entry in self._fresh:
                if entry.stored:
                    log.remove(self.qid, entry.seq, entry.message)
            for entry in self._returned:
                if entry.stored:
                    log.remove(self.qid, entry.seq, entry.message)
            if self._tail:
                log.purge(self.qid, self._tail_from)
                self._tail = 0
        self._fresh.clear()
        self._returned.clear()
        self._ready_bytes = 0
        self._expiry.cancel()
        self.release_flow()
        return count

    # -- consumers ----------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        if self.settings.single_active_consumer and self.consumers:
            self._standby.append(consumer)  # registered, idle until the active one goes
            self.had_consumer = True
            return
        consumers = self.consumers
        index = len(consumers)
        for i, other in enumerate(consumers):
            if other.priority < consumer.priority:
                index = i
                break
        consumers.insert(index, consumer)
        self.had_consumer = True
        if consumer.exclusive:
            self.exclusive_consumer = True
        self.dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        try:
            self.consumers.remove(consumer)
        except ValueError:
            if consumer in self._standby:
                self._standby.remove(consumer)
            return
        if consumer.exclusive:
            self.exclusive_consumer = False
        if self._standby and not self.consumers:
            # Single active consumer: fail over to the longest-waiting one.
            self.add_consumer(self._standby.pop(0))
            return
        if not self.consumers:
            self.release_flow()
            if self._lease is not None:
                self._lease.renew()

    def dispatch(self) -> None:
        """Deliver ready messages while some consumer has room."""
        if self._dispatching:
            return
        if self._featured:
            self._dispatch_featured(None)
            return
        consumers = self.consumers
        if not consumers:
            return
        self._dispatching = True
        try:
            fresh, returned = self._fresh, self._returned
            if len(consumers) == 1:
                consumer = consumers[0]
                while True:
                    if not fresh and self._tail:
                        self._refill()
                        if self._featured:
                            break  # the refill brought expiring entries: redone below
                    if not (fresh or returned) or not consumer.can_take():
                        break
                    entry = heapq.heappop(returned) if returned else fresh.popleft()
                    self.unacked += 1
                    consumer.deliver(entry)
                return
            while True:
                if not fresh and self._tail:
                    self._refill()
                    if self._featured:
                        break
                if not (fresh or returned):
                    break
                i = self._ready_consumer()
                if i < 0:
                    return
                entry = heapq.heappop(returned) if returned else fresh.popleft()
                self.unacked += 1
                self._rotate(i).deliver(entry)
        finally:
            self._dispatching = False
            if self.flow_waiters:
                self.release_flow()
            if self._featured:
                self._dispatch_featured(None)

    def _ready_consumer(self) -> int:
        """Index of the first consumer, in priority order, with room for a delivery; -1 if none."""
        for i, consumer in enumerate(self.consumers):
            if consumer.can_take():
                return i
        return -1

    def _rotate(self, i: int) -> Consumer:
        """Round-robin within one priority: move consumer ``i`` behind its equal-priority peers."""
        consumers = self.consumers
        consumer = consumers[i]
        j = i + 1
        n = len(consumers)
        while j < n and consumers[j].priority == consumer.priority:
            j += 1
        if j - 1 != i:
            del consumers[i]
            consumers.insert(j - 1, consumer)
        return consumer

    def is_unused(self) -> bool:
        return not self.consumers

    # -- features (ttl.py, limits.py, priority.py, dead_letter.py) -------------

    def touch(self) -> None:
        """The queue was declared (or redeclared): renew its ``x-expires`` lease."""
        if self._lease is not None:
            self._lease.renew()

    def _in_use(self) -> bool:
        return bool(self.consumers) or self.deleted

    def _on_lease_expired(self) -> None:
        self._lease = None
        if not self.deleted and self.vhost is not None:
            self.vhost.delete_queue(self)  # no dead-lettering: like a queue.delete

    def _new_entry(self, seq: int, message: Message) -> QueueEntry:
        max_priority = self.settings.max_priority
        if max_priority:
            return PriorityEntry(seq, message, max_priority)
        return QueueEntry(seq, message)

    def _push_ready(self, entry: QueueEntry, requeued: bool) -> None:
        """Make ``entry`` ready again (featured queues); priority queues keep one heap."""
        self._ready_bytes += len(entry.message.body)
        if requeued or type(entry) is PriorityEntry:
            heapq.heappush(self._returned, entry)
        else:
            self._fresh.append(entry)

    def _head(self) -> QueueEntry | None:
        if self._returned:
            return self._returned[0]
        return self._fresh[0] if self._fresh else None

    def _pop_head(self) -> QueueEntry | None:
        if not self._fresh and not self._returned and self._tail:
            self._refill()
        if self._returned:
            entry = heapq.heappop(self._returned)
        elif self._fresh:
            entry = self._fresh.popleft()
        else:
            return None
        self._ready_bytes -= len(entry.message.body)
        return entry

    def _pop_ready(self, now: int, exempt: QueueEntry | None = None) -> QueueEntry | None:
        """The head entry to deliver; expired ones met on the way are dropped."""
        while True:
            entry = self._pop_head()
            if entry is None or entry is exempt or not ttl.is_expired(entry.expires_at, now):
                return entry
            self._drop(entry, dead_letter.EXPIRED)

    def _drop(self, entry: QueueEntry, reason: str) -> None:
        """``entry`` leaves the queue dead: dead-letter it (if configured), forget it.

        The dead-lettered copy is recorded before the removal, in the same loop
        turn: the group commit puts both in one store transaction.
        """
        if self.settings.dead_letter_exchange is not None:
            dead_letter.dead_letter(self, entry.message, reason)
        if entry.stored and self.log is not None:
            self.log.remove(self.qid, entry.seq, entry.message)

    def _publish_featured(self, message: Message) -> bool | int:
        """``publish`` for featured queues: limits, TTL, priorities."""
        if not self._featured:
            self._become_featured()
        settings = self.settings
        size = len(message.body)
        if limits.refuses(settings, self.message_count, self._ready_bytes, size):
            if settings.overflow == "reject-publish-dlx":
                dead_letter.dead_letter(self, message, dead_letter.MAXLEN)
            return REFUSED
        seq = self._next_seq
        self._next_seq = seq + 1
        entry = self._new_entry(seq, message)
        expiration = message.expiration if props_have_expiration(message) else -1
        if expiration >= 0 or settings.message_ttl is not None:
            entry.expires_at = ttl.expiry_of(settings, expiration, ttl.now_ms(self.time))
        persistent = False
        log = self.log
        if self._tail:
            # Became featured while part of its paged tail was not committed yet: append
            # behind it to keep the order (read back once committed; bytes not counted).
            self._tail += 1
            log.enqueue(self.qid, seq, message, not message.persistent, entry.expires_at or 0)
            return message.persistent
        if log is not None and message.persistent:
            persistent = entry.stored = True
            log.enqueue(self.qid, seq, message, False, entry.expires_at or 0)
        self._push_ready(entry, False)
        if self.consumers and not self._dispatching:
            # Deliverable now: a TTL of 0 does not expire it (RabbitMQ's "immediate").
            self._dispatch_featured(entry)
        self._after_change()
        return persistent

    def _dispatch_featured(self, exempt: QueueEntry | None) -> None:
        """``dispatch`` for featured queues: expired heads are dropped, bytes counted."""
        consumers = self.consumers
        if self._dispatching or not consumers:
            return
        self._dispatching = True
        now = ttl.now_ms(self.time)
        try:
            while True:
                i = self._ready_consumer()
                if i < 0:
                    break
                entry = self._pop_ready(now, exempt)
                if entry is None:
                    break
                self.unacked += 1
                self._rotate(i).deliver(entry)
        finally:
            self._dispatching = False
            if self.flow_waiters:
                self.release_flow()

    def _after_change(self) -> None:
        """After entries came or went: expire the head, apply drop-head, re-arm the timer."""
        self._expire_head()
        self._trim()

    def _expire_head(self) -> None:
        now = ttl.now_ms(self.time)
        while True:
            head = self._head()
            if head is None or head.expires_at is None:
                return
            if now < head.expires_at:
                self._expiry.arm(head.expires_at)
                return
            self._pop_head()
            self._drop(head, dead_letter.EXPIRED)

    def _on_expiry_timer(self) -> None:
        if not self.deleted:
            self._expire_head()

    def _trim(self) -> None:
        """drop-head: drop (dead-letter ``maxlen``) the oldest ready entries while over a limit."""
        settings = self.settings
        dropped = False
        while limits.drops_head(settings, self.message_count, self._ready_bytes):
            entry = self._pop_head()
            if entry is None:
                break
            self._drop(entry, dead_letter.MAXLEN)
            dropped = True
        if dropped:
            self._expire_head()


def props_have_expiration(message: Message) -> bool:
    props = message.raw_properties
    return bool(props) and bool(props[0] & _EXPIRATION_BIT)
