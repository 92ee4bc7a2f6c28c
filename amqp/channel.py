"""One AMQP channel: content assembly, the publish → route → enqueue path,
deliveries and their acknowledgements.

Theory of operation
-------------------
A channel is ``open`` until either side starts closing it. Method frames are
dispatched by their method index: the hot methods (publish, ack, nack,
reject) are decoded by ``fastpath``; everything else by pamqp through
``codec`` and a per-class handler table (``handlers/``). ``basic.publish``
makes the channel expect a content header, then body frames until the
announced size is reached; any other frame in between is 505
UNEXPECTED_FRAME, as in RabbitMQ's command assembler.

Replies that promise durability (a durable definition's "-ok", ``tx.commit-ok``)
are sent only after the group commit that records the change (``send_durable``).
While one waits, everything the channel would send after it (later replies,
returns, confirms, a close) queues behind it in ``_held``, so the wire order
is the order in which methods were handled; deliveries to the channel's
consumers wait too (``has_room`` is false) instead of piling up.

Deliveries get per-channel tags from 1. Unacked deliveries are kept in a
``UnackedMap`` (``unacked.py``), O(1) per delivery settled, single or
``multiple``.
When the channel closes, everything unacked goes back to its queue.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pamqp import commands

from leveret.amqp import fastpath
from leveret.amqp.assembler import ContentAssembler, Publish
from leveret.amqp.codec import (
    Method,
    class_and_method,
    class_of,
    decode_method,
    encode_method,
)
from leveret.amqp.handlers import HANDLERS
from leveret.amqp.unacked import UnackedMap, UnknownTag
from leveret.broker import publish_props
from leveret.broker.permissions import WRITE, Access
from leveret.confirms.tracker import ConfirmTracker
from leveret.model.errors import (
    CHANNEL_ERROR,
    FRAME_ERROR,
    INTERNAL_ERROR,
    NOT_FOUND,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    SYNTAX_ERROR,
    ChannelError,
    ConnectionError_,
)
from leveret.model.message import Message, parse_expiration
from leveret.model.stats import MessageStats
from leveret.queues.entry import PublishResult

if TYPE_CHECKING:
    from leveret.amqp.connection import Connection
    from leveret.broker.vhost import VirtualHost
    from leveret.queues.consumer import Consumer
    from leveret.queues.queue import Queue, QueueEntry

log = logging.getLogger(__name__)

_PUBLISH = fastpath.BASIC_PUBLISH
# Deliveries one connection encodes per loop turn before the rest wait for the next turn
# (Connection.batch_bytes): bounds the output held in memory at once (issue 17 item 2).
DELIVERY_BATCH_BYTES = 1 << 20
_ACK = fastpath.BASIC_ACK
_NACK = fastpath.BASIC_NACK
_REJECT = fastpath.BASIC_REJECT
_ACCEPTED = PublishResult.ACCEPTED
_HELD = PublishResult.HELD

# Unacked bookkeeping: tag -> (entry, queue, consumer or None for basic.get).
Delivery = tuple["QueueEntry", "Queue", "Consumer | None"]


class _HeldReply:
    """A reply waiting for its commit, in the channel's output queue."""

    __slots__ = ("failure", "frame", "ready")

    def __init__(self, frame: bytes, failure: ChannelError) -> None:
        self.frame = frame
        self.ready = False
        self.failure = failure  # how the channel closes if the commit fails


def decoded_properties(message: Message) -> Any:
    """The message's properties, decoded on first use: malformed ones are 501 FRAME_ERROR."""
    try:
        return message.properties
    except ValueError as exc:
        raise ConnectionError_(FRAME_ERROR, f"malformed content header: {exc}", (60, 40)) from exc


class Channel:
    def __init__(self, connection: Connection, number: int) -> None:
        self.connection = connection
        self.number = number
        vhost = connection.vhost
        assert vhost is not None  # channels open only on an open connection
        self.vhost: VirtualHost = vhost
        # What the user may do here (broker/permissions.py); replaced when permissions change.
        self.access: Access = connection.broker.accounts.access_for(
            connection.user or "", self.vhost.name)
        self.closing = False
        self.active = True  # channel.flow
        self.content = ContentAssembler()
        self.stats = MessageStats()  # counted in place; read by the management plane
        # deliveries
        self._next_tag = 1
        self._unacked: UnackedMap[Delivery] = UnackedMap()
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
        # Output queued behind replies that wait for a commit (None: nothing waits).
        self._held: list[bytes | _HeldReply] | None = None

    def __repr__(self) -> str:
        return f"<Channel {self.number} of {self.connection}>"

    # -- frames in ----------------------------------------------------------

    def handle_method(self, payload: bytes, index: int) -> None:
        content = self.content
        if content.state:
            content.check_method()
        if index == _PUBLISH:
            try:
                exchange, routing_key, mandatory, immediate = fastpath.decode_publish(payload)
            except ValueError as exc:
                raise ConnectionError_(SYNTAX_ERROR, f"cannot decode basic.publish: {exc}",
                                       (60, 40)) from exc
            if immediate:
                raise ConnectionError_(NOT_IMPLEMENTED, "immediate=true", (60, 40))
            content.start((exchange, routing_key, mandatory))
            return
        if index == _ACK:
            tag, multiple = self._decode(fastpath.decode_ack, payload, index)
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

    def handle_header(self, payload: bytes) -> None:
        done = self.content.header(payload, self.connection.config.max_message_size)
        if done is not None:
            self._complete(*done)

    def handle_body(self, payload: bytes) -> None:
        done = self.content.body(payload)
        if done is not None:
            self._complete(*done)

    def _complete(self, publish: Publish, props: bytes, body: bytes) -> None:
        exchange, routing_key, mandatory = publish
        access = self.access
        if exchange not in access.writable:  # one set lookup once allowed (permissions.py)
            self._check_publish(access, exchange)
        if access.topics is not None:
            self._check_topic(access, exchange, routing_key)
        # Set only at a message boundary: an alarm may stop reading here, never mid-message.
        self.connection.has_published = True
        message = Message(exchange, routing_key, props, body)
        if message.has_user_id:
            self._check_user_id(message)
        if message.has_expiration:
            self._check_expiration(message)
        extra: tuple[str, ...] = ()
        if publish_props.needs_work(message.raw_properties):  # CC/BCC, direct reply-to
            message, extra = publish_props.prepare(
                message, lambda: self.vhost.reply_to.reply_name(self))
        if self.tx is not None:
            self.vhost_exchange(exchange)  # 404 at publish time, as RabbitMQ
            self.tx.append((self.publish, (message, mandatory, extra)))
        else:
            self.publish(message, mandatory, extra)

    def _check_publish(self, access: Access, exchange: str) -> None:
        try:
            access.check_publish(exchange)
        except ChannelError as exc:
            exc.method = (60, 40)
            raise

    def _check_topic(self, access: Access, exchange: str, routing_key: str) -> None:
        ex = self.vhost.exchanges.get(exchange)
        if ex is not None and ex.type == "topic":
            try:
                access.check_topic(WRITE, exchange, routing_key)
            except ChannelError as exc:
                exc.method = (60, 40)
                raise

    def _check_expiration(self, message: Message) -> None:
        """An ``expiration`` must be a TTL in ms (rabbit_channel check_expiration_header)."""
        expiration = decoded_properties(message).expiration
        error = parse_expiration(expiration or "")
        if isinstance(error, str):
            raise ChannelError(PRECONDITION_FAILED,
                               f"invalid expiration '{expiration}': {error}", (60, 40))

    def _check_user_id(self, message: Message) -> None:
        """Validated user-id: a set ``user_id`` must name the authenticated user.

        As RabbitMQ (rabbit_channel ``check_user_id_header``), users tagged
        ``impersonator`` are exempt.
        """
        user_id = decoded_properties(message).user_id
        user = self.connection.user
        if user_id is not None and user_id != user:
            record = self.connection.broker.users.get(user or "")
            if record is not None and "impersonator" in record.tags:
                return
            raise ChannelError(
                PRECONDITION_FAILED,
                f"user_id property set to '{user_id}' but authenticated user was '{user}'",
                (60, 40),
            )

    # -- publish --------------------------------------------------------------

    def vhost_exchange(self, name: str) -> Any:
        exchange = self.vhost.exchanges.get(name)
        if exchange is None:
            raise ChannelError(NOT_FOUND, f"no exchange '{name}' in vhost '{self.vhost.name}'",
                               (60, 40))
        return exchange

    def publish(self, message: Message, mandatory: bool,
                extra_routing_keys: tuple[str, ...] = ()) -> None:
        """Route ``message`` (plus its CC/BCC keys) and enqueue it; confirms and returns as RabbitMQ."""
        try:
            queues = self.vhost.route(message, extra_routing_keys)
        except ValueError as exc:  # properties are decoded lazily, here
            raise ConnectionError_(FRAME_ERROR, f"malformed content header: {exc}",
                                   (60, 40)) from exc
        except ChannelError as exc:
            exc.method = (60, 40)
            raise
        name = message.exchange
        tracer = self.vhost.tracer
        if tracer is not None:  # tracing off: this test is all it costs
            tracer.published(message, [q.name for q in queues], self.connection.user or "",
                             self.number, mandatory)
        stats = self.stats
        stats.publish += 1
        confirms = self.confirms
        if not queues:
            if mandatory:
                stats.return_unroutable += 1
                self._write(
                    fastpath.encode_return(self.number, 312, "NO_ROUTE", name, message.routing_key)
                )
                self._writelines(
                    fastpath.encode_content(self.number, message.raw_properties, message.body,
                                            self.connection.frame_max)
                )
            else:
                stats.drop_unroutable += 1
            if confirms is not None:
                confirms.publish()
                self.connection.want_flush(self)
            return
        held = refused = False
        for queue in queues:
            result = queue.publish(message)
            if result is not _ACCEPTED:
                if result is _HELD:
                    held = True
                else:  # reject-publish overflow (queues/limits.py)
                    refused = True
            if queue.behind():
                self.connection.flow_wait(queue)
        if self.tx_durable is not None and held:
            self.tx_durable = True
        if confirms is not None:
            # A persistent message in a durable queue is confirmed after its commit.
            log = self.vhost.log
            if refused:  # one refusing queue is enough for a nack, as in RabbitMQ
                confirms.settle(confirms.publish(hold=True), False)
                self.connection.want_flush(self)
            elif held and log.deferred:
                log.hold(self, confirms.publish(hold=True))
            else:
                confirms.publish()
                self.connection.want_flush(self)

    def confirm_settled(self, seq: int, ok: bool) -> None:
        """The store committed (or failed to commit) held message ``seq``."""
        if self.confirms is not None and not self.closing:
            self.confirms.settle(seq, ok)
            self.connection.want_flush(self)

    def flush_confirms(self) -> None:
        confirms = self.confirms
        if confirms is None or self.closing or self._held is not None:
            return  # behind a held reply: flushed when it goes out
        write = self.connection.write
        confirmed = confirms.confirmed
        for tag, multiple, ok in confirms.drain():
            if ok:
                write(fastpath.encode_ack(self.number, tag, multiple))
            else:
                write(fastpath.encode_nack(self.number, tag, multiple, False))
        self.stats.confirm += confirms.confirmed - confirmed

    # -- deliveries -------------------------------------------------------------

    def has_room(self) -> bool:
        """Channel-wide (global) prefetch, channel.flow, room in this turn's output batch,
        and no reply held for a commit (deliveries must not overtake it)."""
        conn = self.connection
        if not self.active or not conn.writable or self._held is not None:
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
        conn.batch_bytes += len(frame)
        if self._held is None:
            conn.write(frame)
        else:
            self._held.append(frame)
        stats = self.stats
        tracer = self.vhost.tracer
        if tracer is not None:
            tracer.delivered(consumer.queue.name, message, consumer.tag,
                             entry.delivery_count > 0, self.number, conn.user,
                             not consumer.no_ack)
        if entry.delivery_count:
            stats.redeliver += 1
        entry.delivery_count += 1
        if consumer.no_ack:
            stats.deliver_no_ack += 1
            consumer.queue.settle(entry)
            return
        stats.deliver += 1
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
        self._write(fastpath.encode_deliver_with_content(
            self.number, consumer_tag, self._next_tag, False, message.exchange,
            message.routing_key, message.raw_properties, message.body, conn.frame_max))

    def deliver_get(self, queue: Queue, entry: QueueEntry, no_ack: bool) -> None:
        tag = self._next_tag
        self._next_tag = tag + 1
        message = entry.message
        conn = self.connection
        self._write(fastpath.encode_get_ok(self.number, tag, entry.delivery_count > 0,
                                           message.exchange, message.routing_key,
                                           queue.message_count))
        self._writelines(fastpath.encode_content(self.number, message.raw_properties,
                                                 message.body, conn.frame_max))
        stats = self.stats
        tracer = self.vhost.tracer
        if tracer is not None:
            tracer.delivered(queue.name, message, "", entry.delivery_count > 0, self.number,
                             conn.user, not no_ack)
        if entry.delivery_count:
            stats.redeliver += 1
        if no_ack:
            stats.get_no_ack += 1
        else:
            stats.get += 1
        entry.delivery_count += 1
        if no_ack:
            queue.settle(entry)
            return
        if entry.stored:
            queue.note_delivered(entry)
        entry.delivered_at = conn.clock()
        self._unacked.add(tag, (entry, queue, None))

    def _trace_settled(self, event: str, taken: list[Delivery], requeue: bool | None) -> None:
        tracer = self.vhost.tracer
        assert tracer is not None
        number = self.number
        for entry, queue, consumer in taken:
            tracer.settled(event, queue.name, entry.message, number,
                           consumer.tag if consumer is not None else "", requeue)

    def unacked_in(self, queue: Queue) -> list[tuple[QueueEntry, str]]:
        """This channel's unacked deliveries from ``queue``, oldest first, with the consumer
        tag ("" for basic.get): the console's unacked peek (changes nothing)."""
        return [(entry, consumer.tag if consumer is not None else "")
                for entry, q, consumer in self._unacked.values() if q is queue]

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
        taken = self._take(tag, multiple, _ACK)
        self.stats.ack += len(taken)
        if self.vhost.tracer is not None:
            self._trace_settled("ack", taken, None)
        # Credit is given back before the queue hears of it: settling resumes the consumer.
        for entry, queue, consumer in taken:
            if consumer is not None:
                consumer.unacked -= 1
                self._global_unacked -= 1
            queue.settle(entry)
        if self._global_full:
            self._resume_consumers()

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
        for entry, queue, consumer in taken:
            if consumer is not None:
                consumer.unacked -= 1
                self._global_unacked -= 1
            if requeue:
                queue.requeue(entry)
                touched.add(queue)
            else:
                queue.reject(entry)  # dead-lettered if the queue has a DLX
        # Delivered again only once all are back in place: the oldest goes first.
        for queue in touched:
            queue.deliver_ready()
        if self._global_full:
            self._resume_consumers()

    def recover(self) -> None:
        """basic.recover(requeue=true): every unacked delivery goes back to its queue."""
        self.requeue_all()
        self._resume_consumers()

    def requeue_all(self) -> None:
        touched = set()
        # Requeue newest first is irrelevant: queues restore order by sequence number.
        for entry, queue, consumer in self._unacked.take_all():
            queue.requeue(entry)
            touched.add(queue)
            if consumer is not None:
                consumer.unacked -= 1
        self._global_unacked = 0
        for queue in touched:
            queue.deliver_ready()

    def _resume_consumers(self) -> None:
        """Room may be back for every consumer of the channel (qos, flow, global prefetch).

        O(consumers of the channel), as RabbitMQ's unblock of a channel's consumers;
        an ack of a delivery resumes only its consumer (``Queue.settle``).
        """
        self._global_full = False
        for consumer in list(self.consumers.values()):
            consumer.queue.resume(consumer)

    # -- consumers ------------------------------------------------------------

    def consumer_cancelled_by_broker(self, consumer: Consumer) -> None:
        """The queue went away under the consumer: tell the client if it supports it."""
        if self.consumers.pop(consumer.tag, None) is None:
            return
        if self.connection.client_capability("consumer_cancel_notify") and not self.closing:
            self._write(encode_method(
                self.number, commands.Basic.Cancel(consumer_tag=consumer.tag, nowait=True)))

    def cancel_consumer(self, consumer: Consumer) -> None:
        self.consumers.pop(consumer.tag, None)
        queue = consumer.queue
        queue.remove_consumer(consumer)
        if queue.auto_delete and queue.had_consumer and queue.is_unused() and not queue.deleted:
            self.vhost.delete_queue(queue)

    # -- lifecycle ----------------------------------------------------------------

    def send_method(self, method: Method) -> None:
        self._write(encode_method(self.number, method))

    def _write(self, frame: bytes) -> None:
        if self._held is None:
            self.connection.write(frame)
        else:
            self._held.append(frame)

    def _writelines(self, frames: list[bytes]) -> None:
        if self._held is None:
            self.connection.writelines(frames)
        else:
            self._held.extend(frames)

    def send_durable(self, method: Method, durable: bool, request: tuple[int, int]) -> None:
        """Send ``method`` (the reply to ``request``) once everything recorded so far is
        committed, if it concerns a durable object and anything is still uncommitted.

        If the commit fails the reply is not sent: the channel closes with 541
        INTERNAL_ERROR, as for a failed ``tx.commit``.
        """
        log = self.vhost.log
        if not (durable and log.deferred and log.busy):
            self.send_method(method)
            return
        name = method.name.lower()
        reply = _HeldReply(encode_method(self.number, method), ChannelError(
            INTERNAL_ERROR, f"{name.removesuffix('ok').rstrip('-_')} failed: the message store "
            "could not write", request))
        if self._held is None:
            self._held = []
        self._held.append(reply)
        log.after_commit(lambda ok: self._committed(reply, ok))

    def _committed(self, reply: _HeldReply, ok: bool) -> None:
        held = self._held
        if held is None or self.connection.closing:  # nothing goes out any more
            self._held = None
            return
        failure = None
        if ok:
            reply.ready = True
        else:
            del held[held.index(reply):]  # the reply and what followed it
            failure = None if self.closing else reply.failure
        out: list[bytes] = []
        for item in held:
            if isinstance(item, _HeldReply):
                if not item.ready:
                    break  # replies are committed in order: the rest waits for a later batch
                out.append(item.frame)
            else:
                out.append(item)
        del held[:len(out)]
        if out:
            self.connection.writelines(out)
        if held:
            return
        self._held = None
        if failure is not None:
            self.connection.close_channel(self, failure)
        elif not self.closing:
            if self.confirms is not None:
                self.connection.want_flush(self)
            self._resume_consumers()

    def drop_output(self) -> None:
        """The connection is closing or gone: held replies will never be sent."""
        self._held = None

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
        self.requeue_all()
        for consumer in consumers:
            queue = consumer.queue
            if queue.auto_delete and queue.had_consumer and queue.is_unused() and not queue.deleted:
                self.vhost.delete_queue(queue)
        self.tx = None
        self.content.reset()
