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

if TYPE_CHECKING:
    from leveret.queues.consumer import Consumer

# Ready messages (with consumers attached) above which publishers into the queue are paused,
# and below which they resume. Big enough to keep consumers' prefetch windows full.
FLOW_HIGH = 20_000
FLOW_LOW = 10_000


class QueueEntry:
    """A message's place in one queue; ``delivery_count`` > 0 means redelivered."""

    __slots__ = ("seq", "message", "delivery_count")

    def __init__(self, seq: int, message: Message) -> None:
        self.seq = seq
        self.message = message
        self.delivery_count = 0

    def __lt__(self, other: QueueEntry) -> bool:
        return self.seq < other.seq


class Queue:
    """One queue of one virtual host."""

    __slots__ = (
        "vhost", "name", "durable", "exclusive_owner", "auto_delete", "arguments",
        "_fresh", "_returned", "_next_seq", "consumers", "unacked", "had_consumer",
        "exclusive_consumer", "deleted", "_dispatching", "bound_exchanges", "flow_waiters",
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

    def __repr__(self) -> str:
        return f"<Queue {self.name!r} ready={self.message_count}>"

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    @property
    def message_count(self) -> int:
        """Ready messages (what queue.declare-ok and basic.get-ok report)."""
        return len(self._fresh) + len(self._returned)

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    # -- messages -----------------------------------------------------------

    def publish(self, message: Message) -> None:
        """Append ``message`` and hand it to a consumer if one has room."""
        entry = QueueEntry(self._next_seq, message)
        self._next_seq += 1
        self._fresh.append(entry)
        if self.consumers and not self._dispatching:
            self.dispatch()

    def behind(self) -> bool:
        """Consumers attached but more than FLOW_HIGH ready: publishers should wait."""
        return bool(self.consumers) and len(self._fresh) > FLOW_HIGH

    def release_flow(self, force: bool = False) -> None:
        """Resume paused publishers once the backlog is under FLOW_LOW (or always, if forced)."""
        if self.flow_waiters and (force or not self.consumers
                                  or len(self._fresh) < FLOW_LOW):
            waiters, self.flow_waiters = self.flow_waiters, set()
            for conn in waiters:
                conn.flow_release(self)

    def take(self) -> QueueEntry | None:
        """Remove and return the head entry (basic.get), or None."""
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

    def purge(self) -> int:
        """Drop every ready message; unacked ones are untouched (as RabbitMQ)."""
        count = self.message_count
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
                while (fresh or returned) and consumer.can_take():
                    entry = heapq.heappop(returned) if returned else fresh.popleft()
                    self.unacked += 1
                    consumer.deliver(entry)
                return
            while fresh or returned:
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
