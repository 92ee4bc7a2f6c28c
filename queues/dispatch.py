"""The consumer side of a queue: its consumer ring and the one dispatch loop.

Theory of operation
-------------------
Dispatch is synchronous: a publish that finds a consumer with credit is
written to that consumer's channel in the same call, with no task or future
per message. The loop takes the ring's front consumer; one without credit is
parked, one with credit gets the store's next entry and rotates behind its
peers. A parked consumer comes back when one of its deliveries is settled or
requeued (the entry remembers its ``holder``: O(1), whatever the number of
consumers) or when ``resume``/``dispatch`` says its credit may have changed
for another reason (qos, channel flow, a socket writable again). One loop
delivers at most ``DISPATCH_BUDGET`` messages, then yields to the event loop
and continues on its next turn: no consumer with a big backlog stalls the
other clients.

``Dispatcher`` is the base of ``Queue`` (``queue.py``), which owns the ready
store, the counters and everything else a queue does.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from leveret.queues.consumer_ring import ConsumerRing
from leveret.queues.ready import ReadyStore

if TYPE_CHECKING:
    from leveret.queues import ttl
    from leveret.queues.consumer import Consumer
    from leveret.queues.settings import QueueSettings

# Deliveries one dispatch loop makes before yielding to the event loop (a few ms of work).
DISPATCH_BUDGET = 500


class Dispatcher:
    """Consumers of one queue, and delivery of its ready entries to them."""

    # The delivery counters and consumer flags are written here and by Queue (basic.get).
    __slots__ = ("_continuation", "_delivered", "_dispatching", "_redelivered", "_ring",
                 "_unacked", "exclusive_consumer", "had_consumer")

    _store: ReadyStore
    _lease: ttl.Lease | None
    settings: QueueSettings
    time: ttl.Timekeeping
    deleted: bool
    flow_waiters: set[Any]

    def __init__(self) -> None:
        self._ring: ConsumerRing[Consumer] = ConsumerRing(self.time.clock)
        self._dispatching = False
        self._continuation: Any = None  # the scheduled rest of a loop over budget
        self.had_consumer = False
        self.exclusive_consumer = False
        self._unacked = self._delivered = self._redelivered = 0

    def release_flow(self, force: bool = False) -> None:
        raise NotImplementedError  # Queue's flow control

    @property
    def consumers(self) -> list[Consumer]:
        """Active consumers in priority order (not single-active-consumer standby)."""
        return self._ring.members()

    @property
    def consumer_utilisation(self) -> float:
        """RabbitMQ's consumer_utilisation: the recent share of time a message could go to a
        consumer at once (``consumer_ring.Utilisation``); 0.0 without consumers."""
        ring = self._ring
        return round(ring.use.value(), 4) if ring.active else 0.0

    @property
    def consumer_count(self) -> int:
        return self._ring.active + len(self._ring.standby)

    def all_consumers(self) -> list[Consumer]:
        """Active and (single-active-consumer) standby consumers."""
        return [*self._ring.members(), *self._ring.standby]

    def is_unused(self) -> bool:
        return not self._ring.active

    def add_consumer(self, consumer: Consumer) -> None:
        self.had_consumer = True
        if not self._ring.add(consumer, self.settings.single_active_consumer):
            return  # single active consumer: registered, idle until the active one goes
        if consumer.exclusive:
            self.exclusive_consumer = True
        self._dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer not in self._ring:
            self._ring.remove(consumer)  # a standby consumer, or nothing
            return
        if consumer.exclusive:
            self.exclusive_consumer = False
        promoted = self._ring.remove(consumer)
        if promoted is not None:
            # Single active consumer: failed over to the longest-waiting one. If the old one
            # still holds unacked messages, RabbitMQ 3.10 delivers nothing to the new one
            # until something else runs the queue (a publish, a requeue, the old channel
            # closing, which requeues them first, so they go out first, redelivered).
            if promoted.exclusive:
                self.exclusive_consumer = True
            if not consumer.unacked:
                self._dispatch()
            return
        if not self._ring.active:
            self.release_flow()
            if self._lease is not None:
                self._lease.renew()

    def resume(self, consumer: Consumer) -> None:
        """``consumer``'s credit may be back (its channel regained room): deliver to it."""
        if self._ring.unpark(consumer):
            self._dispatch()

    def resume_channel(self, consumers: Collection[Consumer]) -> None:
        """One channel's room is back (qos, flow, a writable socket, its global prefetch):
        its consumers parked here that can take rejoin in the order they were parked, and
        one run delivers round robin among them, as RabbitMQ unblocks a channel."""
        if self._ring.unpark_those(consumers):
            self._dispatch()

    def park_behind(self, consumers: Collection[Consumer]) -> None:
        """``consumers`` (of one channel, with room of their own) were unblocked by an ack
        while their channel was out of global room: behind the other parked ones."""
        self._ring.park_behind(consumers)

    def deliver_ready(self) -> None:
        """Deliver what consumers known to have credit can take (after requeues)."""
        if self._ring.active:
            self._dispatch()

    def dispatch(self) -> None:
        """Credit may have changed anywhere: look at every consumer again, then deliver."""
        self._ring.unpark_all()
        self._dispatch()

    def wake(self) -> None:
        """Entries became available (the paged tail was committed)."""
        if self._ring.active:
            self._dispatch()

    def _dispatch(self) -> None:
        """The dispatch loop (see the module docstring)."""
        if self._dispatching:
            return
        store = self._store
        entry = store.pop()
        if entry is None:
            return
        self._dispatching = True
        ring = self._ring
        budget = DISPATCH_BUDGET
        try:
            while True:
                consumer = ring.take_turn()
                if consumer is None:
                    store.unpop(entry)
                    break
                self._unacked += 1
                self._delivered += 1
                if entry.delivery_count:
                    self._redelivered += 1
                entry.holder = consumer
                consumer.deliver(entry)
                budget -= 1
                if not budget and self._yield():
                    break
                entry = store.pop()
                if entry is None:
                    break
        finally:
            self._dispatching = False
            if self.flow_waiters:
                self.release_flow()
        if self._store is not store:  # became featured on the way (a tail read)
            self._dispatch()

    def _yield(self) -> bool:
        """Over budget: continue on the next event-loop turn (False: no loop, go on)."""
        scheduler = self.time.scheduler
        if scheduler is None:
            return False
        if self._continuation is None:
            self._continuation = scheduler.call_later(0.0, self._continue)
        return True

    def _continue(self) -> None:
        self._continuation = None
        if not self.deleted and self._ring.active:
            self._dispatch()
