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
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING, Any

from leveret.queues.message import Message
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


class QueueEntry:
    """A message's place in one queue; ``delivery_count`` > 0 means redelivered."""

    __slots__ = ("seq", "message", "delivery_count", "stored")

    def __init__(self, seq: int, message: Message) -> None:
        self.seq = seq
        self.message = message
        self.delivery_count = 0
        self.stored = False  # has an entry in the store that must be removed when settled

    def __lt__(self, other: QueueEntry) -> bool:
        return self.seq < other.seq


class Queue:
    """One queue of one virtual host."""

    __slots__ = (
        "vhost", "name", "durable", "exclusive_owner", "auto_delete", "arguments",
        "_fresh", "_returned", "_next_seq", "consumers", "unacked", "had_consumer",
        "exclusive_consumer", "deleted", "_dispatching", "bound_exchanges", "flow_waiters",
        "qid", "log", "_tail", "_tail_from", "_refill_waiting", "settings",
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

    def apply_settings(self, settings: QueueSettings) -> None:
        """New effective settings (a policy changed); features pick them up from here."""
        self.settings = settings

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    # -- messages -----------------------------------------------------------

    def publish(self, message: Message) -> bool:
        """Append ``message`` and hand it to a consumer if one has room.

        Returns True when a durable write was recorded for a persistent message:
        its publisher confirm must wait for the commit.
        """
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
        want = min(PAGE_HIGH - len(self._fresh), PAGE_BATCH, self._tail)
        if want <= 0:
            return
        stored = self.log.read_queue(self.qid, self._tail_from, want)
        fresh = self._fresh
        for item in stored:
            entry = QueueEntry(item.seq, item.message)
            entry.delivery_count = item.delivery_count
            entry.stored = True
            fresh.append(entry)
        if stored:
            self._tail -= len(stored)
            self._tail_from = stored[-1].seq + 1
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
        heapq.heappush(self._returned, entry)

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
        self.release_flow()
        return count

    # -- consumers ----------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
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
            return
        if consumer.exclusive:
            self.exclusive_consumer = False
        if not self.consumers:
            self.release_flow()

    def dispatch(self) -> None:
        """Deliver ready messages while some consumer has room."""
        if self._dispatching:
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
                    if not (fresh or returned) or not consumer.can_take():
                        break
                    entry = heapq.heappop(returned) if returned else fresh.popleft()
                    self.unacked += 1
                    consumer.deliver(entry)
                return
            while True:
                if not fresh and self._tail:
                    self._refill()
                if not (fresh or returned):
                    break
                for i, consumer in enumerate(consumers):
                    if consumer.can_take():
                        break
                else:
                    return
                entry = heapq.heappop(returned) if returned else fresh.popleft()
                self.unacked += 1
                # Round-robin within one priority: move behind equal-priority peers.
                j = i + 1
                n = len(consumers)
                prio = consumer.priority
                while j < n and consumers[j].priority == prio:
                    j += 1
                if j - 1 != i:
                    del consumers[i]
                    consumers.insert(j - 1, consumer)
                consumer.deliver(entry)
        finally:
            self._dispatching = False
            if self.flow_waiters:
                self.release_flow()

    def is_unused(self) -> bool:
        return not self.consumers
