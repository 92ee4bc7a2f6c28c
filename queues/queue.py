"""A classic queue: a ready store, a consumer ring, and one dispatch loop between them.

Theory of operation
-------------------
Every message that enters the queue gets a queue-local sequence number and
goes to the queue's ready store, chosen once from its settings (``ready.py``:
plain and paged, featured for TTL and limits, priority). The consumers sit in
a ``ConsumerRing`` (``consumer_ring.py``): priority order, round-robin within a
priority, consumers without credit parked out of the rotation, and the
single-active-consumer standby list. ``Queue`` orchestrates the two and owns
the queue's counters.

Consumers, the dispatch loop between them and the store, and the delivery
counters are a part, ``dispatcher`` (``dispatch.py``), handed the queue on each
call rather than holding it.

Durable queues record what must survive a restart through ``log`` (the
broker's group commit): persistent messages when they enter, their delivery
counts, and their removal. If the write of a batch fails, its publishers get
``basic.nack`` and the queue forgets the entries of that batch
(``_on_commit``): a nacked publish leaves no trace in the queue.

Flow control: a queue with consumers that falls behind (more than
``FLOW_HIGH`` ready messages) makes the connections publishing into it stop
reading (they join ``flow_waiters``) until it is back under ``FLOW_LOW``.
That is what RabbitMQ's credit flow achieves: publishers go at the pace of
the consumers instead of filling memory. A queue without consumers never
throttles: building a backlog there is legitimate.

Counters (``published``, ``delivered``, ``redelivered``, ``acked``,
``dropped``, ``unacked``) are plain integers updated where the work happens
and read-only outside; rates are computed by whoever samples them.
"""

from __future__ import annotations

import operator
from collections import deque
from typing import TYPE_CHECKING, Any

from leveret.model.message import FLAG_EXPIRATION, Message
from leveret.queues import dead_letter, dedupe, limits, tracing, ttl

# The store and paging modules, not their names: compiled, plain_store's init imports
# this module (its .pxd cimports Queue), so whichever of them is imported first finds
# the others half-imported. Only a queue's creation and store changes read them.
from leveret.queues import featured_store as featured_store_module
from leveret.queues import paging as paging_module
from leveret.queues import plain_store as plain_store_module
from leveret.queues import priority_store as priority_store_module
from leveret.queues.dispatch import Dispatcher
from leveret.queues.entry import PriorityEntry, PublishResult, QueueEntry
from leveret.queues.host import QueueHost, QueueLog
from leveret.queues.ready import ReadyStore
from leveret.queues.settings import REJECT_PUBLISH_DLX, QueueSettings, from_arguments

if TYPE_CHECKING:
    from collections.abc import Collection

    from leveret.queues.consumer import Consumer

__all__ = ["PriorityEntry", "PublishResult", "Queue", "QueueEntry"]

# Ready messages (with consumers attached) above which publishers into the queue are paused,
# and below which they resume. Big enough to keep consumers' prefetch windows full.
FLOW_HIGH = 20_000
FLOW_LOW = 10_000

# High byte of the property flags: the expiration bit (a cheap test on every publish).
_EXPIRATION_BIT = FLAG_EXPIRATION >> 8
_REFUSED = PublishResult.REFUSED


def _counter(slot: str, doc: str) -> property:
    """A read-only view of one of the queue's counters."""
    return property(operator.attrgetter(slot), doc=doc)


class Queue:
    """One queue of one virtual host."""

    __slots__ = (
        "__weakref__",
        "_acked",
        "_batch_no",
        "_batches",
        "_delivered_below",
        "_dropped",
        "_lease",
        "_next_seq",
        "_published",
        "arguments",
        "auto_delete",
        "bound_exchanges",
        "dedupe",
        "deleted",
        "dispatcher",
        "durable",
        "exclusive_owner",
        "flow_waiters",
        "log",
        "name",
        "page_high",
        "paging",
        "qid",
        "ready",
        "settings",
        "time",
        "vhost",
    )

    def __init__(
        self,
        vhost: QueueHost | None,
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
        # Deduplication while in the queue (dedupe.py); None for almost every queue.
        self.dedupe = dedupe.for_queue(self.arguments)
        self.time = ttl.timekeeping_of(vhost)
        # Ready entries the store keeps in memory before paging (paging.py).
        self.paging = vhost.paging if vhost is not None else paging_module.Paging()
        self.page_high = self.paging.page_high(self.settings)
        # Durability: set by the vhost for durable queues (qid from the store).
        self.qid = 0
        self.log: QueueLog | None = None
        self.deleted = False
        # Exchanges holding a binding to this queue: unbound when it is deleted.
        self.bound_exchanges: set[Any] = set()
        # Connections paused because this queue fell behind its consumers.
        self.flow_waiters: set[Any] = set()
        # The ready store (browsed by ``browse.py``, used by the management operations).
        self.ready: ReadyStore = self._choose_store()
        self.dispatcher = Dispatcher(self.time)  # consumers and the dispatch loop
        self._next_seq = 0
        # Stored entries with a lower seq were delivered (batch.DeliveredBelow); -1: a
        # priority queue, which delivers out of seq order and marks each entry instead.
        self._delivered_below = -1 if self.settings.max_priority else 0
        self._lease: ttl.Lease | None = None
        # Store batches holding our enqueues: (batch number, first seq), oldest first.
        self._batches: deque[tuple[int, int]] = deque()
        self._batch_no = -1
        self._published = self._acked = self._dropped = 0
        self._configure(None)

    def __repr__(self) -> str:
        return f"<Queue {self.name!r} ready={self.message_count}>"

    def _choose_store(self) -> ReadyStore:
        s = self.settings
        if s.max_priority:
            return priority_store_module.PriorityStore(self)
        if s.message_ttl is not None or limits.has_limit(s):
            return featured_store_module.FeaturedStore(self)
        return plain_store_module.PlainStore(self)

    # -- counters (read-only) ----------------------------------------------------------

    @property
    def message_count(self) -> int:
        """Ready messages (what queue.declare-ok and basic.get-ok report)."""
        return len(self.ready)

    @property
    def paged_out(self) -> int:
        """Ready messages only the disk store holds (the paged-out tail), not in memory."""
        return self.ready.paged_out

    unacked = _counter("dispatcher.unacked",
                       "Delivered (to a consumer or basic.get), not yet settled.")
    published = _counter("_published", "Messages accepted (refused ones are not counted).")
    delivered = _counter("dispatcher.delivered",
                         "Deliveries, to consumers and basic.get, redeliveries too.")
    redelivered = _counter("dispatcher.redelivered", "Deliveries with the redelivered flag.")
    acked = _counter("_acked", "Deliveries acknowledged.")
    dropped = _counter("_dropped", "Expired, refused or over a limit, rejected, lost to a "
                                   "failed store write: gone without a consumer's ack.")

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    # -- consumers (the dispatcher's, seen from outside the queue) ------------------------

    @property
    def consumers(self) -> list[Consumer]:
        """Active consumers in priority order (not single-active-consumer standby)."""
        return self.dispatcher.consumers

    @property
    def consumer_count(self) -> int:
        return self.dispatcher.consumer_count

    @property
    def consumer_utilisation(self) -> float:
        return self.dispatcher.consumer_utilisation

    @property
    def exclusive_consumer(self) -> bool:
        return self.dispatcher.exclusive_consumer

    @property
    def had_consumer(self) -> bool:
        return self.dispatcher.had_consumer

    def all_consumers(self) -> list[Consumer]:
        return self.dispatcher.all_consumers()

    def is_unused(self) -> bool:
        return not self.dispatcher.ring.active

    def add_consumer(self, consumer: Consumer) -> None:
        self.dispatcher.add_consumer(self, consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        self.dispatcher.remove_consumer(self, consumer)

    def resume(self, consumer: Consumer) -> None:
        self.dispatcher.resume(self, consumer)

    def resume_channel(self, consumers: Collection[Consumer]) -> None:
        self.dispatcher.resume_channel(self, consumers)

    def park_behind(self, consumers: Collection[Consumer]) -> None:
        """``consumers`` (of one channel, with room of their own) were unblocked by an ack
        while their channel was out of global room: behind the other parked ones."""
        self.dispatcher.ring.park_behind(consumers)

    def deliver_ready(self) -> None:
        """Deliver what consumers known to have credit can take (after requeues)."""
        self.dispatcher.deliver_ready(self)

    wake = deliver_ready  # entries became available (the paged tail was committed)

    def dispatch(self) -> None:
        """Credit may have changed anywhere: look at every consumer again, then deliver."""
        self.dispatcher.dispatch(self)

    # -- settings --------------------------------------------------------------------

    def apply_settings(self, settings: QueueSettings) -> None:
        """New effective settings (a policy changed); features pick them up from here."""
        old, self.settings = self.settings, settings
        self._configure(old)

    def _configure(self, old: QueueSettings | None) -> None:
        s = self.settings
        if (s.message_ttl is not None or limits.has_limit(s)) and not self.ready.expires:
            self.needs_expiry()
        if old is None or old.expires != s.expires:
            if self._lease is not None:
                self._lease.cancel()
                self._lease = None
            if s.expires is not None:
                self._lease = ttl.Lease(self.time, s.expires, self._on_lease_expired,
                                        self._in_use)
        if old is not None:
            self.ready.after_change()

    def repage(self) -> None:
        """The broker's memory pressure changed (``paging.py``): page by the new bound, and
        page out what is in memory beyond it."""
        self.page_high = high = self.paging.page_high(self.settings)
        if high < paging_module.UNBOUNDED and not self.deleted:
            self.ready.page_out(high)

    def needs_expiry(self) -> None:
        """Plain → featured, once: the plain store hands over its entries and its tail."""
        store = self.ready
        if isinstance(store, plain_store_module.PlainStore):
            entries, tail = store.take_all()
            self.ready = featured_store_module.FeaturedStore(self, entries, tail)

    def recover(self, count: int, first_seq: int, next_seq: int,
                size: int | None = None) -> None:
        """A durable queue after a restart: all its stored entries are ready, still on disk
        (``size``: their body bytes, None if the store does not know them)."""
        self._next_seq = next_seq
        self.ready.recover(count, first_seq, size)

    # -- messages --------------------------------------------------------------------

    def publish(self, message: Message) -> PublishResult:
        """Append ``message`` and hand it to a consumer if one has credit.

        ``HELD``: a durable write was recorded for a persistent message, its
        publisher confirm must wait for the commit; ``REFUSED``: reject-publish
        overflow, the publisher gets a nack.
        """
        props = message.raw_properties
        if props and props[0] & _EXPIRATION_BIT and not self.ready.expires:
            self.needs_expiry()
        seq = self._next_seq
        self._next_seq = seq + 1
        store = self.ready
        result = store.enqueue(seq, message)
        if result is _REFUSED:
            return result
        self._published += 1
        dispatcher = self.dispatcher
        if dispatcher.ring.active:
            dispatcher.run(self)
        if store.expires:
            store.after_change()  # featured stores: expire the head, apply drop-head
        return result

    def take(self) -> QueueEntry | None:
        """Remove and return the head entry for basic.get (counted unacked), or None."""
        if self._lease is not None:
            self._lease.renew()
        entry = self.ready.pop()
        self.ready.after_change()
        if entry is not None:
            entry.holder = None
            dispatcher = self.dispatcher
            dispatcher.unacked += 1
            dispatcher.delivered += 1
            if entry.delivery_count:
                dispatcher.redelivered += 1
        return entry

    def note_delivered(self, entry: QueueEntry) -> None:
        """Persist that a stored entry was delivered for manual ack (its ``redelivered``
        flag after a restart): a first delivery in a FIFO queue raises the queue's mark,
        any other delivery records the entry's count."""
        log = self.log
        assert log is not None  # stored entries belong to durable queues
        below = self._delivered_below
        if below >= 0 and entry.delivery_count == 1:
            seq = entry.seq
            if seq >= below:
                self._delivered_below = seq + 1
                log.mark_delivered_below(self.qid, seq + 1)
            return
        log.mark_delivered(self.qid, entry.seq, entry.message, entry.delivery_count)

    def settle(self, entry: QueueEntry) -> None:
        """A delivered entry was acked: it is gone; its consumer may take another."""
        dispatcher = self.dispatcher
        dispatcher.unacked -= 1
        self._acked += 1
        if self.dedupe is not None:
            self.dedupe.release(entry.message)
        if entry.stored and not self.deleted:
            log = self.log
            assert log is not None  # stored entries belong to durable queues
            log.remove(self.qid, entry.seq, entry.message)
        ring = dispatcher.ring  # resume_holder, inline: this runs once per ack
        if entry.holder in ring.parked and ring.unpark(entry.holder):
            dispatcher.run(self)

    def settle_many(self, entries: list[QueueEntry]) -> None:
        """``settle`` of each of ``entries`` (a multiple ack), with one call; the caller
        resumes the consumers (``Channel._settle_many``)."""
        self.dispatcher.unacked -= len(entries)
        self._acked += len(entries)
        if self.dedupe is not None:
            for entry in entries:
                self.dedupe.release(entry.message)
        if self.deleted:
            return
        stored = [entry.seq for entry in entries if entry.stored]
        if stored:
            log = self.log
            assert log is not None  # stored entries belong to durable queues
            log.remove_many(self.qid, stored)

    def reject(self, entry: QueueEntry, resume: bool = True) -> None:
        """A delivered entry was rejected without requeue: dead-letter it (if configured).
        ``resume=False``: the caller resumes its consumer (``Channel._resume_freed``)."""
        self.dispatcher.unacked -= 1
        if not self.deleted:
            self.drop(entry, dead_letter.REJECTED)
        if resume:
            self.dispatcher.resume_holder(self, entry.holder)

    def requeue(self, entry: QueueEntry) -> None:
        """Put a delivered entry back in its original position (delivered by ``deliver_ready``)."""
        self.dispatcher.unacked -= 1
        if self.deleted:
            return
        holder = entry.holder
        if holder is not None:
            self.dispatcher.ring.unpark(holder)
        limit = self.settings.delivery_limit
        if limit is not None and entry.delivery_count > limit:
            self.drop(entry, dead_letter.DELIVERY_LIMIT)
            return
        self.ready.requeue(entry)
        self.ready.after_change()

    def close(self) -> None:
        """Deleted and purged: the store cancels its timers and lets go of this queue
        (``deleted.DeletedOwner``), so the queue is freed as soon as nothing holds it."""
        self.ready.close()

    def purge(self) -> int:
        """Drop every ready message; unacked ones are untouched (as RabbitMQ)."""
        count = self.ready.purge()
        if self.dedupe is not None:
            self.dedupe.clear()
        self.release_flow()
        return count

    def drop(self, entry: QueueEntry, reason: str) -> None:
        """``entry`` leaves the queue dead: dead-letter it (if configured), forget it.

        The dead-lettered copy is recorded before the removal, in the same loop
        turn: the group commit puts both in one store transaction.
        """
        self._dropped += 1
        if self.dedupe is not None:
            self.dedupe.release(entry.message)
        vhost = self.vhost
        if vhost is not None and vhost.tracer is not None:
            tracing.dropped(vhost.tracer, self.name, entry.message, reason,
                            self.settings.dead_letter_exchange)
        if self.settings.dead_letter_exchange is not None:
            dead_letter.dead_letter(self, entry.message, reason)
        if entry.stored and self.log is not None:
            self.log.remove(self.qid, entry.seq, entry.message)

    def refuse(self, message: Message) -> None:
        self._dropped += 1
        dlx = self.settings.overflow == REJECT_PUBLISH_DLX
        vhost = self.vhost
        if vhost is not None and vhost.tracer is not None:
            tracing.dropped(vhost.tracer, self.name, message, dead_letter.MAXLEN,
                            self.settings.dead_letter_exchange if dlx else None)
        if dlx:
            dead_letter.dead_letter(self, message, dead_letter.MAXLEN)

    # -- failed store writes ------------------------------------------------------------

    def written(self, seq: int) -> None:
        """The store recorded the enqueue of ``seq``: note the batch it is in (``_on_commit``)."""
        log = self.log
        assert log is not None  # only durable queues record enqueues
        batch = log.batch
        if batch != self._batch_no:
            self._batch_no = batch
            self._batches.append((batch, seq))
            log.after_commit(self._on_commit)

    def _on_commit(self, ok: bool) -> None:
        batches = self._batches
        _, start = batches.popleft()
        if ok or self.deleted:
            return
        end = batches[0][1] if batches else self._next_seq
        lost = self.ready.forget(start, end)
        self._dropped += lost

    # -- flow control ----------------------------------------------------------------

    def behind(self) -> bool:
        """Consumers attached but more than FLOW_HIGH ready: publishers should wait."""
        if not self.dispatcher.ring.active:
            return False
        return self.ready.backlog > FLOW_HIGH

    def release_flow(self, force: bool = False) -> None:
        """Resume paused publishers once the backlog is under FLOW_LOW (or always, if forced)."""
        if self.flow_waiters and (force or not self.dispatcher.ring.active
                                  or self.ready.backlog < FLOW_LOW):
            waiters, self.flow_waiters = self.flow_waiters, set()
            for conn in waiters:
                conn.flow_release(self)

    # -- queue TTL (x-expires) ---------------------------------------------------------

    def touch(self) -> None:
        """The queue was declared (or redeclared): renew its ``x-expires`` lease."""
        if self._lease is not None:
            self._lease.renew()

    def _in_use(self) -> bool:
        return bool(self.dispatcher.ring.active) or self.deleted

    def _on_lease_expired(self) -> None:
        self._lease = None
        if not self.deleted and self.vhost is not None:
            self.vhost.delete_queue(self)  # no dead-lettering: like a queue.delete

