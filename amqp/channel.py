"""One AMQP channel: frames in, deliveries out, and their acknowledgements.

Theory of operation
-------------------
A channel is ``open`` until either side starts closing it. Method frames are
dispatched by their method index: the hot methods (publish, ack, nack,
reject) are decoded by ``fastpath``; everything else by pamqp through
``codec`` and a per-class handler table (``handlers/``). ``basic.publish``
makes the channel expect a content header, then body frames until the
announced size is reached; any other frame in between is 505
UNEXPECTED_FRAME, as in RabbitMQ's command assembler. The complete message
goes down the publish path (``publishing.py``: functions of the channel, which
answers the broker as the publish's ``Origin``).

Replies that promise durability wait for their commit, and the channel's
later output waits behind them (``output``, a ``ChannelOutput``:
``held_output.py``); deliveries wait too (``has_room`` is false).

Deliveries get per-channel tags from 1. Unacked deliveries are kept in a
``UnackedMap`` (``unacked.py``), O(1) per delivery settled, single or
``multiple``.
When the channel closes, everything unacked goes back to its queue.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import groupby
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from pamqp import commands

from leveret.amqp import fastpath
from leveret.amqp.assembler import ContentAssembler, Publish
from leveret.amqp.codec import (
    class_and_method,
    class_of,
    decode_method,
)
from leveret.amqp.handlers import HANDLERS
from leveret.amqp.held_output import ChannelOutput
from leveret.amqp.publishing import complete
from leveret.amqp.unacked import UnackedMap, UnknownTag
from leveret.broker.permissions import Access
from leveret.confirms.tracker import ConfirmTracker
from leveret.model import object_stats
from leveret.model.errors import (
    CHANNEL_ERROR,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    SYNTAX_ERROR,
    ChannelError,
    ConnectionError_,
)
from leveret.model.message import Message
from leveret.model.object_stats import ExchangeCounters, QueueCounters
from leveret.model.stats import MessageStats

if TYPE_CHECKING:
    from leveret.amqp.connection import Connection
    from leveret.broker.basic_get import Got
    from leveret.broker.vhost import VirtualHost
    from leveret.queues.consumer import Consumer, SharedContent
    from leveret.queues.entry import QueueEntry
    from leveret.queues.queue import Queue

_PUBLISH = fastpath.BASIC_PUBLISH
# Deliveries one connection encodes per loop turn before the rest wait for the next turn
# (Connection.batch_bytes): bounds the output held in memory at once.
DELIVERY_BATCH_BYTES = 1 << 20
_ACK = fastpath.BASIC_ACK
_NACK = fastpath.BASIC_NACK
_REJECT = fastpath.BASIC_REJECT

# Unacked bookkeeping: tag -> (entry, queue, consumer or None for basic.get).
Delivery = tuple["QueueEntry", "Queue", "Consumer | None"]
_ENTRY = itemgetter(0)
_QUEUE_AND_CONSUMER = itemgetter(1, 2)


def _decode_publish(payload: bytes) -> Publish:
    """basic.publish's (exchange, routing key, mandatory); 505/540 as RabbitMQ."""
    try:
        exchange, routing_key, mandatory, immediate = fastpath.decode_publish(payload)
    except ValueError as exc:
        raise ConnectionError_(SYNTAX_ERROR, f"cannot decode basic.publish: {exc}",
                               (60, 40)) from exc
    if immediate:
        raise ConnectionError_(NOT_IMPLEMENTED, "immediate=true", (60, 40))
    return exchange, routing_key, mandatory


class Channel:
    """One open channel: frames in, deliveries out, their acknowledgements."""

    def __init__(self, connection: Connection, number: int) -> None:
        self.connection = connection
        self.number = number
        # Everything the channel writes goes through here (held behind a commit or not).
        self.output = ChannelOutput(connection, number)
        vhost = connection.vhost
        assert vhost is not None  # channels open only on an open connection
        self.vhost: VirtualHost = vhost
        # What the user may do here (broker/permissions.py); replaced when permissions change.
        self.access: Access = connection.broker.accounts.access_for(
            connection.user or "", self.vhost.name)
        self.closing = False
        self.active = True  # channel.flow
        self.content = ContentAssembler()
        # The last basic.publish payload and its decoding: a publisher repeats its exchange
        # and routing key, so the commonest publish skips the decode (handle_publish).
        self._publish_method = b""
        self._publish: Publish = ("", "", False)
        # Counted in place, per exchange (by name) and per queue (model/object_stats.py; a
        # consumer holds its queue's QueueCounters); ``stats`` sums them for the management
        # plane. ``counted`` has the confirms and the counts of pruned queues.
        self.counted = MessageStats()
        self.exchange_stats: dict[str, ExchangeCounters] = {}
        self.queue_stats: dict[Queue, QueueCounters] = {}
        self._queue_stats_prune_at = object_stats.PRUNE_AT
        # deliveries
        self._next_tag = 1
        self._unacked = UnackedMap()
        self.consumers: dict[str, Consumer] = {}
        self.consumer_prefetch = 0
        self.global_prefetch = 0
        self._global_unacked = 0
        self._global_full = False  # a consumer met the global prefetch limit
        # modes
        self.confirms: ConfirmTracker | None = None
        self.tx: list[Any] | None = None  # pending publishes/acks when in tx mode
        self.tx_durable: bool | None = None  # during tx.commit: did it write to the store?
        self.last_queue_name: str | None = None
        self.valid_properties: dict[bytes, bool] = {}  # publishing.py

    def __repr__(self) -> str:
        return f"<Channel {self.number} of {self.connection}>"

    @property
    def stats(self) -> MessageStats:
        """The channel's message_stats, summed from its counters when read (not per
        message): the management API, Prometheus and the vhost's totals read these."""
        return object_stats.channel_totals(self.exchange_stats.values(),
                                           self.queue_stats.values(), self.counted)

    # -- frames in ----------------------------------------------------------

    def handle_method(self, payload: bytes, index: int) -> None:
        content = self.content
        if content.state:
            content.check_method()
        if index == _PUBLISH:
            content.start(_decode_publish(payload))
            return
        if index == _ACK:
            try:
                tag, multiple = fastpath.decode_ack(payload)
            except ValueError as exc:
                raise ConnectionError_(SYNTAX_ERROR, str(exc), (60, 80)) from exc
            self.ack(tag, multiple)
            return
        if index == _NACK:
            tag, multiple, requeue = self._decode(fastpath.decode_nack, payload, index)
            self.reject(tag, multiple, requeue, index)
            return
        if index == _REJECT:
            tag, requeue = self._decode(fastpath.decode_reject, payload, index)
            self.reject(tag, False, requeue, index)
            return
        method = decode_method(payload, index)
        handler = HANDLERS.get(index)
        if handler is None:
            raise ConnectionError_(
                CHANNEL_ERROR if class_of(index) == 10 else NOT_IMPLEMENTED,
                f"{method.name.lower()} is not allowed on channel {self.number}"
                if class_of(index) == 10 else f"{method.name.lower()} is not implemented",
                class_and_method(index),
            )
        try:
            handler(self, method)
        except ChannelError as exc:
            if exc.method == (0, 0):
                exc.method = class_and_method(index)
            raise

    @staticmethod
    def _decode(fn: Any, payload: bytes, index: int) -> Any:
        try:
            return fn(payload)
        except ValueError as exc:
            raise ConnectionError_(SYNTAX_ERROR, str(exc), class_and_method(index)) from exc

    def handle_publish(self, method: bytes, header: bytes, body: bytes) -> None:
        """basic.publish, its content header and its one body frame, all arrived
        (``frames.FRAME_PUBLISH``): what ``handle_method``, ``handle_header`` and
        ``handle_body`` do in turn, in one call."""
        content = self.content
        if content.state:
            content.check_method()
        if method != self._publish_method:
            self._publish = _decode_publish(method)
            self._publish_method = method
        complete(self, *content.whole(self._publish, header, body,
                                      self.connection.config.max_message_size))

    def handle_header(self, payload: bytes) -> None:
        done = self.content.header(payload, self.connection.config.max_message_size)
        if done is not None:
            complete(self, *done)

    def handle_body(self, payload: bytes) -> None:
        done = self.content.body(payload)
        if done is not None:
            complete(self, *done)

    # -- what broker.publishing asks of its Origin ---------------------------------------

    @property
    def trace_user(self) -> str:
        return self.connection.user or ""

    @property
    def trace_channel(self) -> int | None:
        return self.number

    @property
    def trace_confirm(self) -> bool:
        return self.confirms is not None

    def flow_wait(self, queue: Queue) -> None:
        self.connection.flow_wait(queue)

    def confirms_settled(self, seqs: list[int], ok: bool) -> None:
        """The store committed (or failed to commit) held messages ``seqs``."""
        if self.confirms is not None and not self.closing:
            self.confirms.settle_many(seqs, ok)
            self.connection.want_flush(self)

    # -- deliveries -------------------------------------------------------------

    def has_room(self) -> bool:
        """Channel-wide (global) prefetch, channel.flow, room in this turn's output batch,
        and no reply held for a commit (deliveries must not overtake it)."""
        conn = self.connection
        if not self.active or not conn.writable or self.output.held is not None:
            return False
        if conn.batch_bytes >= DELIVERY_BATCH_BYTES:
            conn.batch_full = True  # resumed when the batch is taken for the wire
            return False
        if self.global_prefetch and self._global_unacked >= self.global_prefetch:
            # Consumers found no room here are parked by their queues: wake them on an ack.
            self._global_full = True
            return False
        return True

    def deliver(self, consumer: Consumer, entry: QueueEntry) -> None:
        tag = self._next_tag
        self._next_tag = tag + 1
        message = entry.message
        conn = self.connection
        frame = fastpath.encode_deliver_with_content(
            self.number, consumer.tag, tag, entry.delivery_count > 0, message.exchange,
            message.routing_key, message.raw_properties, message.body, conn.frame_max)
        self._delivered(consumer, entry, tag, frame)

    def deliver_shared(self, consumer: Consumer, entry: QueueEntry,
                       shared: SharedContent) -> None:
        """A delivery whose content frames several consumers share (a stream's page): they
        are encoded once per channel number and frame_max; only the method frame is this
        consumer's."""
        tag = self._next_tag
        self._next_tag = tag + 1
        message = entry.message
        conn = self.connection
        key = self.number << 32 | conn.frame_max
        content = shared.frames
        if shared.frames_key != key:
            content = shared.frames = b"".join(fastpath.encode_content(
                self.number, message.raw_properties, message.body, conn.frame_max))
            shared.frames_key = key
        self._delivered(consumer, entry, tag, fastpath.encode_deliver(
            self.number, consumer.tag, tag, entry.delivery_count > 0, message.exchange,
            message.routing_key) + content)

    def _delivered(self, consumer: Consumer, entry: QueueEntry, tag: int, frame: bytes) -> None:
        """Write ``frame`` (delivery ``tag`` of ``entry``), trace it and count it unacked."""
        message = entry.message
        conn = self.connection
        conn.batch_bytes += len(frame)
        held = self.output.held
        if held is None:
            conn.write(frame)
        else:
            held.append(frame)
        tracer = self.vhost.tracer
        if tracer is not None:  # a "deliver" record (queues/tracing.py), built here: cheaper
            tracer.record(("deliver", next(tracer.seq), tracer.now, message.raw_properties,
                           message.exchange, message.routing_key, consumer.queue.name,
                           consumer.tag, entry.delivery_count > 0, self.number, conn.user,
                           not consumer.no_ack))
        counters = consumer.counters
        if entry.delivery_count:
            counters.redeliver += 1
        entry.delivery_count += 1
        if consumer.no_ack:
            counters.deliver_no_ack += 1
            consumer.queue.settle(entry)
            return
        counters.deliver += 1
        if entry.stored:
            consumer.queue.note_delivered(entry)
        entry.delivered_at = conn.clock()  # shown by the console's unacked peek
        consumer.unacked += 1
        self._global_unacked += 1
        self._unacked.add(tag, (entry, consumer.queue, consumer))

    def deliver_reply(self, consumer_tag: str, message: Message) -> None:
        """A direct reply-to delivery: no ack expected, so the tag is not consumed
        (``broker/reply_to.py`` explains why, as RabbitMQ does)."""
        conn = self.connection
        self.output.write(fastpath.encode_deliver_with_content(
            self.number, consumer_tag, self._next_tag, False, message.exchange,
            message.routing_key, message.raw_properties, message.body, conn.frame_max))

    def deliver_get(self, queue: Queue, got: Got, no_ack: bool) -> None:
        """basic.get-ok for what ``broker.basic_get`` took (counted and traced there)."""
        tag = self._next_tag
        self._next_tag = tag + 1
        entry = got.entry
        message = entry.message
        conn, output = self.connection, self.output
        output.write(fastpath.encode_get_ok(self.number, tag, got.redelivered,
                                            message.exchange, message.routing_key,
                                            got.message_count))
        output.writelines(fastpath.encode_content(self.number, message.raw_properties,
                                                  message.body, conn.frame_max))
        if not no_ack:
            entry.delivered_at = conn.clock()
            self._unacked.add(tag, (entry, queue, None))

    def queue_counters(self, queue: Queue) -> QueueCounters:
        """This channel's counters for ``queue`` (``model/object_stats.py``)."""
        counters = self.queue_stats.get(queue)
        if counters is None:
            if len(self.queue_stats) >= self._queue_stats_prune_at:
                kept = object_stats.without_deleted(self.queue_stats)
                for gone, dropped in self.queue_stats.items():
                    if gone not in kept:  # its counts stay in the channel's totals
                        self.counted.add(object_stats.as_message_stats(dropped))
                self.queue_stats = kept
                self._queue_stats_prune_at = object_stats.next_prune(len(kept))
            counters = self.queue_stats[queue] = QueueCounters()
        return counters

    def _trace_settled(self, event: str, taken: list[Delivery], requeue: bool | None) -> None:
        tracer = self.vhost.tracer
        assert tracer is not None
        number, record, seq, now = self.number, tracer.record, tracer.seq, tracer.now
        for entry, queue, consumer in taken:  # "ack"/"nack"/"reject" records, built here
            message = entry.message
            record((event, next(seq), now, message.raw_properties, message.exchange,
                    message.routing_key, queue.name, number,
                    consumer.tag if consumer is not None else "", requeue))

    @property
    def unacked_count(self) -> int:
        """Deliveries not yet acked (RabbitMQ's ``messages_unacknowledged``)."""
        return len(self._unacked)

    def unacked_in(self, queue: Queue) -> list[tuple[QueueEntry, str]]:
        """This channel's unacked deliveries from ``queue``, oldest first, with the consumer
        tag ("" for basic.get): the console's unacked peek (changes nothing)."""
        return [(entry, consumer.tag if consumer is not None else "")
                for entry, q, consumer in self._unacked.values() if q is queue]

    def deliveries(self) -> Iterator[Delivery]:
        """Every unacked delivery (entry, queue, consumer or None for basic.get), oldest
        first; changes nothing (the management plane's byte totals, ``queue_bytes.py``)."""
        return self._unacked.values()

    # -- acknowledgements --------------------------------------------------------

    def _take(self, tag: int, multiple: bool, index: int) -> list[Delivery]:
        try:
            return self._unacked.take(tag, multiple)
        except UnknownTag:
            raise ChannelError(PRECONDITION_FAILED, f"unknown delivery tag {tag}",
                               class_and_method(index)) from None

    def ack(self, tag: int, multiple: bool) -> None:
        if self.tx is not None:
            self._take_check(tag, multiple, _ACK)
            self.tx.append((self.ack_now, (tag, multiple)))
            return
        self.ack_now(tag, multiple)

    def _take_check(self, tag: int, multiple: bool, index: int) -> None:
        if (not multiple or tag) and tag not in self._unacked:
            raise ChannelError(PRECONDITION_FAILED, f"unknown delivery tag {tag}",
                               class_and_method(index))

    def ack_now(self, tag: int, multiple: bool) -> None:
        if multiple or self._global_full or self.vhost.tracer is not None:
            self._ack_taken(self._take(tag, multiple, _ACK))
            return
        # The usual ack, one delivery: one pop, no list (C calls, compiled).
        delivery = self._unacked.take_one(tag)
        if delivery is None:
            raise ChannelError(PRECONDITION_FAILED, f"unknown delivery tag {tag}",
                               class_and_method(_ACK))
        entry, queue, consumer = delivery
        # Credit is given back before the queue hears of it: settling resumes the consumer.
        if consumer is not None:
            consumer.unacked -= 1
            self._global_unacked -= 1
            consumer.counters.ack += 1
        else:
            self.queue_counters(queue).ack += 1
        queue.settle(entry)

    def _ack_taken(self, taken: list[Delivery]) -> None:
        """``ack_now`` of a multiple ack, under a global prefetch, or traced: settled as a
        run whatever its length (one delivery too: ``queue.settle``'s lines, which a single
        ack's fast path keeps for itself, are ``settle_many`` then the holder's resume)."""
        if self.vhost.tracer is not None:
            self._trace_settled("ack", taken, None)
        self._resume_freed(self._settle_many(taken))

    def _settle_many(self, taken: list[Delivery]) -> dict[Consumer, int]:
        """Settle every delivery without resuming anyone; returns how many each consumer
        had settled."""
        freed: dict[Consumer, int] = {}
        # Runs of one queue and consumer (usually the whole ack) settle in one call each.
        for (queue, consumer), run in groupby(taken, _QUEUE_AND_CONSUMER):
            entries = list(map(_ENTRY, run))
            count = len(entries)
            if consumer is not None:
                consumer.unacked -= count
                self._global_unacked -= count
                consumer.counters.ack += count
                freed[consumer] = freed.get(consumer, 0) + count
            else:
                self.queue_counters(queue).ack += count
            queue.settle_many(entries)
        return freed

    def _resume_freed(self, freed: dict[Consumer, int]) -> None:
        """Resume the consumers an ack freed as RabbitMQ 3.10 does: its channel acks each
        consumer tag to its queue in turn, in tag byte order, and each freed consumer is
        filled before the next (``tests/integration/test_differential_semantics.py``).
        Once the global prefetch holds the channel (before the ack, or from a refill), its
        queues are suspended until its limiter hears of the ack: a consumer that was full
        then unblocks the channel's consumers with room of their own, which are blocked
        again at once, behind the others; then the channel resumes and they rejoin in
        that order, round robin, not one filled first."""
        pending = dict(freed)
        for consumer in sorted(freed, key=_tag_bytes):
            count = pending.pop(consumer)
            if not self._global_full:
                consumer.queue.resume(consumer)
            elif consumer.prefetch and consumer.unacked + count >= consumer.prefetch:
                queue = consumer.queue
                queue.park_behind([c for c in self.consumers.values() if c.queue is queue and (
                    not c.prefetch or c.unacked + pending.get(c, 0) < c.prefetch)])
        if self._global_full and (self._global_unacked < self.global_prefetch
                                  or not self.global_prefetch):
            self.resume_consumers()

    def reject(self, tag: int, multiple: bool, requeue: bool, index: int) -> None:
        if self.tx is not None:
            self._take_check(tag, multiple, index)
            self.tx.append((self.reject_now, (tag, multiple, requeue, index)))
            return
        self.reject_now(tag, multiple, requeue, index)

    def reject_now(self, tag: int, multiple: bool, requeue: bool, index: int) -> None:
        touched = set()
        taken = self._take(tag, multiple, index)
        if self.vhost.tracer is not None:
            self._trace_settled("nack" if index == _NACK else "reject", taken, requeue)
        if not requeue:  # settled as an ack is (RabbitMQ discards per consumer tag too)
            freed: dict[Consumer, int] = {}
            for entry, queue, consumer in taken:
                if consumer is not None:
                    consumer.unacked -= 1
                    self._global_unacked -= 1
                    freed[consumer] = freed.get(consumer, 0) + 1
                queue.reject(entry, resume=False)  # dead-lettered if the queue has a DLX
            self._resume_freed(freed)
            return
        for entry, queue, consumer in taken:
            if consumer is not None:
                consumer.unacked -= 1
                self._global_unacked -= 1
            queue.requeue(entry)
            touched.add(queue)
        # Delivered again only once all are back in place: the oldest goes first.
        for queue in touched:
            queue.deliver_ready()
        if self._global_full:
            self.resume_consumers()

    def recover(self) -> None:
        """basic.recover(requeue=true): every unacked delivery goes back to its queue."""
        self.requeue_all("basic.recover")
        self.resume_consumers()

    def requeue_all(self, reason: str) -> None:
        touched = set()
        tracer = self.vhost.tracer
        # Requeue newest first is irrelevant: queues restore order by sequence number.
        for entry, queue, consumer in self._unacked.take_all():
            if tracer is not None:
                tracer.requeued(queue.name, entry.message, self.number,
                                consumer.tag if consumer is not None else "", reason)
            queue.requeue(entry)
            touched.add(queue)
            if consumer is not None:
                consumer.unacked -= 1
        self._global_unacked = 0
        for queue in touched:
            queue.deliver_ready()

    def resume_consumers(self) -> None:
        """Room may be back for every consumer of the channel (qos, flow, global prefetch):
        in each queue, those parked that can take rejoin in the order they were parked
        (``Dispatcher.resume_channel``). O(consumers of the channel), as RabbitMQ's unblock
        of a channel's consumers; an ack of a delivery resumes only its consumer
        (``Queue.settle``) unless the global prefetch held the channel.
        """
        self._global_full = False
        by_queue: dict[Queue, set[Consumer]] = {}
        for consumer in self.consumers.values():
            by_queue.setdefault(consumer.queue, set()).add(consumer)
        for queue, consumers in by_queue.items():
            queue.resume_channel(consumers)

    # -- consumers ------------------------------------------------------------

    def consumer_cancelled_by_broker(self, consumer: Consumer) -> None:
        """The queue went away under the consumer: tell the client if it supports it."""
        if self.consumers.pop(consumer.tag, None) is None:
            return
        if self.connection.client_capability("consumer_cancel_notify") and not self.closing:
            self.output.send_method(commands.Basic.Cancel(consumer_tag=consumer.tag,
                                                          nowait=True))

    def cancel_consumer(self, consumer: Consumer) -> None:
        self.consumers.pop(consumer.tag, None)
        queue = consumer.queue
        queue.remove_consumer(consumer)
        if queue.auto_delete and queue.had_consumer and queue.is_unused() and not queue.deleted:
            self.vhost.delete_queue(queue)

    # -- lifecycle ----------------------------------------------------------------

    def release(self) -> None:
        """The channel is gone (closed or its connection dropped): requeue and cancel."""
        self.closing = True
        self.vhost.closed_channel_stats.add(self.stats)
        self.connection.broker.churn.channel_closed += 1
        self.vhost.reply_to.release(self)
        consumers = list(self.consumers.values())
        # Cancel first, so requeued messages are not handed straight back to this channel.
        for consumer in consumers:
            self.consumers.pop(consumer.tag, None)
            consumer.queue.remove_consumer(consumer)
        self.requeue_all("channel closed")
        for consumer in consumers:
            queue = consumer.queue
            if queue.auto_delete and queue.had_consumer and queue.is_unused() and not queue.deleted:
                self.vhost.delete_queue(queue)
        self.tx = None
        self.content.reset()


def _tag_bytes(consumer: Consumer) -> bytes:
    return consumer.tag.encode()
