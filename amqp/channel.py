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

Deliveries get per-channel tags from 1. Unacked deliveries are kept in a
dict by tag plus a deque in tag order, so ``multiple`` acks pop from the left
and single acks pop from the dict (the deque is compacted lazily).
When the channel closes, everything unacked goes back to its queue.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from leveret.amqp import fastpath, publish_props
from leveret.amqp.codec import Method, decode_method, encode_method
from leveret.amqp.errors import (
    ACCESS_REFUSED,
    CHANNEL_ERROR,
    FRAME_ERROR,
    NOT_FOUND,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    SYNTAX_ERROR,
    UNEXPECTED_FRAME,
    ChannelError,
    ConnectionError_,
)
from leveret.amqp.handlers import HANDLERS
from leveret.amqp.reply_to import PREFIX as REPLY_TO_PREFIX
from leveret.confirms.tracker import ConfirmTracker
from leveret.exchanges.router import route
from leveret.queues.message import Message, parse_expiration
from leveret.queues.entry import PublishResult
from pamqp import commands

if TYPE_CHECKING:
    from leveret.amqp.connection import Connection
    from leveret.queues.consumer import Consumer
    from leveret.queues.queue import Queue, QueueEntry

log = logging.getLogger(__name__)

_PUBLISH = fastpath.BASIC_PUBLISH
_ACK = fastpath.BASIC_ACK
_NACK = fastpath.BASIC_NACK
_REJECT = fastpath.BASIC_REJECT
_ACCEPTED = PublishResult.ACCEPTED
_HELD = PublishResult.HELD

# Unacked bookkeeping: tag -> (entry, queue, consumer or None for basic.get).
Delivery = tuple["QueueEntry", "Queue", "Consumer | None"]


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
        self.vhost = connection.vhost
        self.closing = False
        self.active = True  # channel.flow
        # content assembly
        self._publish: tuple[str, str, bool] | None = None
        self._props: bytes = b""
        self._body_size = 0
        self._body_parts: list[bytes] = []
        self._body_len = 0
        self._expect_header = False
        # deliveries
        self._next_tag = 1
        self._unacked: dict[int, Delivery] = {}
        self._tag_order: deque[int] = deque()
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

    def __repr__(self) -> str:
        return f"<Channel {self.number} of {self.connection}>"

    # -- frames in ----------------------------------------------------------

    def handle_method(self, payload: bytes, index: int) -> None:
        if self._expect_header or self._publish is not None:
            raise ConnectionError_(
                UNEXPECTED_FRAME,
                f"expected content {'header' if self._expect_header else 'body'} for class 60, "
                f"got non content {'header' if self._expect_header else 'body'} frame instead",
                (60, 40),  # RabbitMQ names the publish whose content was interrupted
            )
        if index == _PUBLISH:
            try:
                exchange, routing_key, mandatory, immediate = fastpath.decode_publish(payload)
            except ValueError as exc:
                raise ConnectionError_(SYNTAX_ERROR, f"cannot decode basic.publish: {exc}",
                                       (60, 40)) from exc
            if immediate:
                raise ConnectionError_(NOT_IMPLEMENTED, "immediate=true", (60, 40))
            self._publish = (exchange, routing_key, mandatory)
            self._expect_header = True
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
                CHANNEL_ERROR if index >> 16 == 10 else NOT_IMPLEMENTED,
                f"{method.name.lower()} is not allowed on channel {self.number}"
                if index >> 16 == 10 else f"{method.name.lower()} is not implemented",
                (index >> 16, index & 0xFFFF),
            )
        try:
            handler(self, method)
        except ChannelError as exc:
            if exc.method == (0, 0):
                exc.method = (index >> 16, index & 0xFFFF)
            raise

    @staticmethod
    def _decode(fn: Any, payload: bytes, index: int) -> Any:
        try:
            return fn(payload)
        except ValueError as exc:
            raise ConnectionError_(SYNTAX_ERROR, str(exc), (index >> 16, index & 0xFFFF)) from exc

    def handle_header(self, payload: bytes) -> None:
        if not self._expect_header:
            raise ConnectionError_(
                UNEXPECTED_FRAME, "expected method frame, got non method frame instead"
            )
        try:
            class_id, body_size, props = fastpath.decode_content_header(payload)
        except ValueError as exc:
            raise ConnectionError_(FRAME_ERROR, f"malformed content header: {exc}") from exc
        if class_id != 60:
            raise ConnectionError_(UNEXPECTED_FRAME,
                                   f"content header for class {class_id} after basic.publish")
        self._expect_header = False
        self._props = props
        self._body_size = body_size
        limit = self.connection.config.max_message_size
        if body_size > limit:
            self._publish = None
            raise ChannelError(
                PRECONDITION_FAILED,
                f"message size {body_size} is larger than configured max size {limit}",
                (60, 40),
            )
        if body_size == 0:
            self._complete(b"")

    def handle_body(self, payload: bytes) -> None:
        if self._publish is None or self._expect_header:
            raise ConnectionError_(
                UNEXPECTED_FRAME,
                "expected content header for class 60, got non content header frame instead"
                if self._expect_header else "expected method frame, got non method frame instead",
            )
        size = self._body_len + len(payload)
        if size > self._body_size:
            raise ConnectionError_(
                FRAME_ERROR, f"content body exceeds the announced size {self._body_size}"
            )
        if size == self._body_size and not self._body_parts:
            self._complete(payload)
            return
        self._body_parts.append(payload)
        self._body_len = size
        if size == self._body_size:
            body = b"".join(self._body_parts)
            self._body_parts = []
            self._body_len = 0
            self._complete(body)

    def _complete(self, body: bytes) -> None:
        publish = self._publish
        assert publish is not None
        self._publish = None
        exchange, routing_key, mandatory = publish
        # Set only at a message boundary: an alarm may stop reading here, never mid-message.
        self.connection.has_published = True
        message = Message(exchange, routing_key, self._props, body)
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

    def _check_expiration(self, message: Message) -> None:
        """An ``expiration`` must be a TTL in ms (rabbit_channel check_expiration_header)."""
        expiration = decoded_properties(message).expiration
        error = parse_expiration(expiration or "")
        if isinstance(error, str):
            raise ChannelError(PRECONDITION_FAILED,
                               f"invalid expiration '{expiration}': {error}", (60, 40))

    def _check_user_id(self, message: Message) -> None:
        """Validated user-id: a set ``user_id`` must name the authenticated user.

        RabbitMQ (rabbit_channel ``check_user_id_header``) exempts users tagged
        ``impersonator``; Leveret has no user tags, so nobody is exempt.
        """
        user_id = decoded_properties(message).user_id
        user = self.connection.user
        if user_id is not None and user_id != user:
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
        vhost = self.vhost
        name = message.exchange
        if not name:
            queue = vhost.queues.get(message.routing_key)
            queues: Any = (queue,) if queue is not None else ()
            if extra_routing_keys or (
                    queue is None and message.routing_key.startswith(REPLY_TO_PREFIX)):
                queues = self._route_default(message, extra_routing_keys)
        else:
            exchange = vhost.exchanges.get(name)
            if exchange is None:
                raise ChannelError(NOT_FOUND, f"no exchange '{name}' in vhost '{vhost.name}'",
                                   (60, 40))
            if exchange.internal:
                raise ChannelError(
                    ACCESS_REFUSED,
                    f"cannot publish to internal exchange '{name}' in vhost '{vhost.name}'",
                    (60, 40),
                )
            headers = None
            # Decoded only when some exchange on the way (e2e, AE) may match on headers.
            if (exchange.type == "headers" or exchange.matcher.exchange_bindings
                    or "alternate-exchange" in exchange.arguments
                    or exchange.policy_alternate_exchange is not None):
                try:
                    headers = message.headers
                except ValueError as exc:  # properties are decoded lazily, here
                    raise ConnectionError_(FRAME_ERROR, f"malformed content header: {exc}",
                                           (60, 40)) from exc
            queues = route(exchange, message.routing_key, headers, vhost.exchanges.get,
                           extra_routing_keys)
        confirms = self.confirms
        if not queues:
            if mandatory:
                self.connection.write(
                    fastpath.encode_return(self.number, 312, "NO_ROUTE", name, message.routing_key)
                )
                self.connection.writelines(
                    fastpath.encode_content(self.number, message.raw_properties, message.body,
                                            self.connection.frame_max)
                )
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

    def _route_default(self, message: Message, extra: tuple[str, ...]) -> list[Any]:
        """The default exchange with CC/BCC keys or direct reply-to names.

        Each queue once; reply names are delivered to here and, as in RabbitMQ
        3.10, do not count as routes (``reply_to.py``).
        """
        vhost = self.vhost
        queues: dict[str, Any] = {}
        for key in dict.fromkeys((message.routing_key, *extra)):
            queue = vhost.queues.get(key)
            if queue is not None:
                queues[key] = queue
            elif key.startswith(REPLY_TO_PREFIX):
                vhost.reply_to.deliver(key, message)
        return list(queues.values())

    def confirm_settled(self, seq: int, ok: bool) -> None:
        """The store committed (or failed to commit) held message ``seq``."""
        if self.confirms is not None and not self.closing:
            self.confirms.settle(seq, ok)
            self.connection.want_flush(self)

    def flush_confirms(self) -> None:
        confirms = self.confirms
        if confirms is None or self.closing:
            return
        write = self.connection.write
        for tag, multiple, ok in confirms.drain():
            if ok:
                write(fastpath.encode_ack(self.number, tag, multiple))
            else:
                write(fastpath.encode_nack(self.number, tag, multiple, False))

    # -- deliveries -------------------------------------------------------------

    def has_room(self) -> bool:
        """Channel-wide (global) prefetch and channel.flow."""
        if not self.active or not self.connection.writable:
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
        conn.write(fastpath.encode_deliver_with_content(
            self.number, consumer.tag, tag, entry.delivery_count > 0, message.exchange,
            message.routing_key, message.raw_properties, message.body, conn.frame_max))
        entry.delivery_count += 1
        if consumer.no_ack:
            consumer.queue.settle(entry)
            return
        if entry.stored:
            consumer.queue.note_delivered(entry)
        consumer.unacked += 1
        self._global_unacked += 1
        self._unacked[tag] = (entry, consumer.queue, consumer)
        self._tag_order.append(tag)

    def deliver_get(self, queue: Queue, entry: QueueEntry, no_ack: bool) -> None:
        tag = self._next_tag
        self._next_tag = tag + 1
        message = entry.message
        conn = self.connection
        conn.write(fastpath.encode_get_ok(self.number, tag, entry.delivery_count > 0,
                                          message.exchange, message.routing_key,
                                          queue.message_count))
        conn.writelines(fastpath.encode_content(self.number, message.raw_properties, message.body,
                                                conn.frame_max))
        entry.delivery_count += 1
        if no_ack:
            queue.settle(entry)
            return
        if entry.stored:
            queue.note_delivered(entry)
        self._unacked[tag] = (entry, queue, None)
        self._tag_order.append(tag)

    # -- acknowledgements --------------------------------------------------------

    def _take(self, tag: int, multiple: bool, index: int) -> list[Delivery]:
        unacked = self._unacked
        if not multiple:
            delivery = unacked.pop(tag, None)
            if delivery is None:
                raise ChannelError(PRECONDITION_FAILED, f"unknown delivery tag {tag}",
                                   (index >> 16, index & 0xFFFF))
            if len(self._tag_order) > 2 * len(unacked) + 64:
                self._tag_order = deque(t for t in self._tag_order if t in unacked)
            return [delivery]
        if tag and tag not in unacked:
            raise ChannelError(PRECONDITION_FAILED, f"unknown delivery tag {tag}",
                               (index >> 16, index & 0xFFFF))
        order = self._tag_order
        out = []
        while order and (tag == 0 or order[0] <= tag):
            delivery = unacked.pop(order.popleft(), None)
            if delivery is not None:
                out.append(delivery)
        return out

    def ack(self, tag: int, multiple: bool) -> None:
        if self.tx is not None:
            self._take_check(tag, multiple, _ACK)
            self.tx.append((self.ack_now, (tag, multiple)))
            return
        self.ack_now(tag, multiple)

    def _take_check(self, tag: int, multiple: bool, index: int) -> None:
        if (not multiple or tag) and tag not in self._unacked:
            raise ChannelError(PRECONDITION_FAILED, f"unknown delivery tag {tag}",
                               (index >> 16, index & 0xFFFF))

    def ack_now(self, tag: int, multiple: bool) -> None:
        # Credit is given back before the queue hears of it: settling resumes the consumer.
        for entry, queue, consumer in self._take(tag, multiple, _ACK):
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
        for entry, queue, consumer in self._take(tag, multiple, index):
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
        for entry, queue, consumer in self._unacked.values():
            queue.requeue(entry)
            touched.add(queue)
            if consumer is not None:
                consumer.unacked -= 1
        self._unacked.clear()
        self._tag_order.clear()
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
            self.connection.write(encode_method(
                self.number, commands.Basic.Cancel(consumer_tag=consumer.tag, nowait=True)))

    def cancel_consumer(self, consumer: Consumer) -> None:
        self.consumers.pop(consumer.tag, None)
        queue = consumer.queue
        queue.remove_consumer(consumer)
        if queue.auto_delete and queue.had_consumer and queue.is_unused() and not queue.deleted:
            self.vhost.delete_queue(queue)

    # -- lifecycle ----------------------------------------------------------------

    def send_method(self, method: Method) -> None:
        self.connection.write(encode_method(self.number, method))

    def release(self) -> None:
        """The channel is gone (closed or its connection dropped): requeue and cancel."""
        self.closing = True
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
        self._publish = None
        self._expect_header = False
