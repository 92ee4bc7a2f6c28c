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

``Dispatcher`` is a part of ``Queue`` (``queue.py``), which owns the ready store,
the settings and everything else a queue does. The dispatcher keeps the ring, the
delivery counters and the loop's state, and is handed its queue (a ``DispatchOwner``)
by each call that needs it: it holds no reference back, so a deleted queue is freed
as soon as nothing else holds it (``deleted.py`` says why that matters).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Protocol

from leveret.queues.consumer_ring import ConsumerRing

if TYPE_CHECKING:
    from leveret.queues.consumer import Consumer
    from leveret.queues.ready import ReadyStore
    from leveret.queues.settings import QueueSettings
    from leveret.queues.ttl import Handle, Timekeeping

# Deliveries one dispatch loop makes before yielding to the event loop (a few ms of work).
DISPATCH_BUDGET = 500


class DispatchOwner(Protocol):
    """What the dispatcher needs from its queue."""

    ready: ReadyStore  # where entries come from; replaced when the queue gains features
    settings: QueueSettings
    time: Timekeeping
    deleted: bool
    flow_waiters: set[Any]  # connections paused by the queue's flow control

    def release_flow(self, force: bool = False) -> None:
        """Resume paused publishers if the queue has caught up."""

    def touch(self) -> None:
        """Renew the queue's ``x-expires`` lease (it has just become unused)."""


class Dispatcher:
    """Consumers of one queue, and delivery of its ready entries to them."""

    __slots__ = ("_continuation", "_dispatching", "delivered", "exclusive_consumer",
                 "had_consumer", "redelivered", "ring", "unacked")

    def __init__(self, time: Timekeeping) -> None:
        self.ring = ConsumerRing(time.clock)
        self._dispatching = False
        self._continuation: Handle | None = None  # the rest of a loop over budget
        self.had_consumer = False
        self.exclusive_consumer = False
        # Counted here and by the queue (basic.get, settling); the queue shows them.
        self.unacked = self.delivered = self.redelivered = 0

    @property
    def consumers(self) -> list[Consumer]:
        """Active consumers in priority order (not single-active-consumer standby)."""
        return self.ring.members()

    @property
    def consumer_utilisation(self) -> float:
        """RabbitMQ's consumer_utilisation: the recent share of time a message could go to a
        consumer at once (``consumer_ring.Utilisation``); 0.0 without consumers."""
        ring = self.ring
        return round(ring.use.value(), 4) if ring.active else 0.0

    @property
    def consumer_count(self) -> int:
        return self.ring.active + len(self.ring.standby)

    def all_consumers(self) -> list[Consumer]:
        """Active and (single-active-consumer) standby consumers."""
        return [*self.ring.members(), *self.ring.standby]

    def add_consumer(self, owner: DispatchOwner, consumer: Consumer) -> None:
        self.had_consumer = True
        if not self.ring.add(consumer, owner.settings.single_active_consumer):
            return  # single active consumer: registered, idle until the active one goes
        if consumer.exclusive:
            self.exclusive_consumer = True
        self.run(owner)

    def remove_consumer(self, owner: DispatchOwner, consumer: Consumer) -> None:
        ring = self.ring
        if consumer not in ring:
            ring.remove(consumer)  # a standby consumer, or nothing
            return
        if consumer.exclusive:
            self.exclusive_consumer = False
        promoted = ring.remove(consumer)
        if promoted is not None:
            # Single active consumer: failed over to the longest-waiting one. If the old one
            # still holds unacked messages, RabbitMQ 3.10 delivers nothing to the new one
            # until something else runs the queue (a publish, a requeue, the old channel
            # closing, which requeues them first, so they go out first, redelivered).
            if promoted.exclusive:
                self.exclusive_consumer = True
            if not consumer.unacked:
                self.run(owner)
            return
        if not ring.active:
            owner.release_flow()
            owner.touch()

    def resume(self, owner: DispatchOwner, consumer: Consumer) -> None:
        """``consumer``'s credit may be back (its channel regained room): deliver to it."""
        if self.ring.unpark(consumer):
            self.run(owner)

    def resume_holder(self, owner: DispatchOwner, holder: Consumer | None) -> None:
        """A delivery of ``holder`` (None: basic.get) was settled: if that parked it,
        it may take again."""
        ring = self.ring
        if holder in ring.parked and ring.unpark(holder):
            self.run(owner)

    def resume_channel(self, owner: DispatchOwner, consumers: Collection[Consumer]) -> None:
        """One channel's room is back (qos, flow, a writable socket, its global prefetch):
        its consumers parked here that can take rejoin in the order they were parked, and
        one run delivers round robin among them, as RabbitMQ unblocks a channel."""
        if self.ring.unpark_those(consumers):
            self.run(owner)

    def deliver_ready(self, owner: DispatchOwner) -> None:
        """Deliver what consumers known to have credit can take (after requeues, or
        entries became available: the paged tail was committed)."""
        if self.ring.active:
            self.run(owner)

    def dispatch(self, owner: DispatchOwner) -> None:
        """Credit may have changed anywhere: look at every consumer again, then deliver."""
        self.ring.unpark_all()
        self.run(owner)

    def run(self, owner: DispatchOwner) -> None:
        """The dispatch loop (see the module docstring)."""
        if self._dispatching:
            return
        store = owner.ready
        entry = store.pop()
        if entry is None:
            return
        self._dispatching = True
        ring = self.ring
        budget = DISPATCH_BUDGET
        try:
            while True:
                consumer = ring.take_turn()
                if consumer is None:
                    store.unpop(entry)
                    break
                self.unacked += 1
                self.delivered += 1
                if entry.delivery_count:
                    self.redelivered += 1
                entry.holder = consumer
                consumer.deliver(entry)
                budget -= 1
                if not budget and self._yield(owner):
                    break
                entry = store.pop()
                if entry is None:
                    break
        finally:
            self._dispatching = False
            if owner.flow_waiters:
                owner.release_flow()
        if owner.ready is not store:  # became featured on the way (a tail read)
            self.run(owner)

    def _yield(self, owner: DispatchOwner) -> bool:
        """Over budget: continue on the next event-loop turn (False: no loop, go on)."""
        scheduler = owner.time.scheduler
        if scheduler is None:
            return False
        if self._continuation is None:
            self._continuation = scheduler.call_later(0.0, lambda: self._continue(owner))
        return True

    def _continue(self, owner: DispatchOwner) -> None:
        self._continuation = None
        if not owner.deleted and self.ring.active:
            self.run(owner)
