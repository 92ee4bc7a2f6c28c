"""basic.qos / consume / cancel / get / recover (publish and acks are on the channel's fast path)."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from pamqp import commands

from leveret.amqp.handlers.queue import readable
from leveret.broker.basic_get import basic_get
from leveret.broker.reply_to import PSEUDO_QUEUE
from leveret.model.errors import (
    ACCESS_REFUSED,
    NOT_ALLOWED,
    NOT_IMPLEMENTED,
    ChannelError,
    ConnectionError_,
)
from leveret.queues.arguments import check_integer_argument
from leveret.queues.consumer import Consumer
from leveret.queues.stream import Stream

if TYPE_CHECKING:
    from leveret.amqp.channel import Channel


def qos(ch: Channel, m: commands.Basic.Qos) -> None:
    if m.prefetch_size:
        raise ConnectionError_(NOT_IMPLEMENTED, f"prefetch_size!=0 ({m.prefetch_size})", (60, 10))
    if m.global_:
        ch.global_prefetch = m.prefetch_count
    else:
        ch.consumer_prefetch = m.prefetch_count
        # RabbitMQ 3.10 lifts the channel's global prefetch here too (rabbit_channel:
        # "ensures that if default was set, it's overridden"): both apply only when the
        # global one comes second.
        ch.global_prefetch = 0
    ch.output.send_method(commands.Basic.QosOk())
    ch.resume_consumers()


def consume(ch: Channel, m: commands.Basic.Consume) -> None:
    if m.queue == PSEUDO_QUEUE:
        _consume_reply_to(ch, m)
        return
    queue = readable(ch, m.queue)
    tag = m.consumer_tag or "amq.ctag-" + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
    if tag in ch.consumers:
        raise ConnectionError_(NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'", (60, 20))
    if queue.exclusive_consumer or (m.exclusive and queue.consumers):
        raise ChannelError(
            ACCESS_REFUSED,
            f"queue '{queue.name}' in vhost '{ch.vhost.name}' in exclusive use",
        )
    arguments = dict(m.arguments or {})
    if isinstance(queue, Stream):  # its refusals (406/540) come before any other check
        queue.check_consumer(m.no_ack, ch.consumer_prefetch, ch.global_prefetch, arguments)
    priority = check_integer_argument("x-priority", arguments.get("x-priority", 0),
                                      ch.vhost.describe_queue(queue.name))
    consumer = Consumer(tag, ch, queue, m.no_ack, m.exclusive, ch.consumer_prefetch, priority,
                        arguments)
    consumer.counters = ch.queue_counters(queue)
    ch.consumers[tag] = consumer
    if not m.nowait:
        ch.output.send_method(commands.Basic.ConsumeOk(consumer_tag=tag))
    queue.add_consumer(consumer)


def _consume_reply_to(ch: Channel, m: commands.Basic.Consume) -> None:
    """The direct reply-to pseudo-queue (reply_to.py): no queue, no Consumer."""
    tag = m.consumer_tag
    if tag in ch.consumers:
        raise ConnectionError_(NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'", (60, 20))
    if not tag:
        tag = "amq.ctag-" + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
    ch.vhost.reply_to.consume(ch, tag, m.no_ack)
    if not m.nowait:
        ch.output.send_method(commands.Basic.ConsumeOk(consumer_tag=tag))


def cancel(ch: Channel, m: commands.Basic.Cancel) -> None:
    if ch.vhost.reply_to.cancel(ch, m.consumer_tag or ""):
        if not m.nowait:
            ch.output.send_method(commands.Basic.CancelOk(consumer_tag=m.consumer_tag))
        return
    consumer = ch.consumers.get(m.consumer_tag or "")
    if not m.nowait:
        ch.output.send_method(commands.Basic.CancelOk(consumer_tag=m.consumer_tag))
    if consumer is not None:
        ch.cancel_consumer(consumer)


def get(ch: Channel, m: commands.Basic.Get) -> None:
    queue = readable(ch, m.queue)
    got = basic_get(queue, m.no_ack, ch.queue_counters(queue), ch.vhost.tracer,
                    ch.connection.user or "", ch.number)
    if got is None:
        ch.output.send_method(commands.Basic.GetEmpty())
        return
    ch.deliver_get(queue, got, m.no_ack)


def recover(ch: Channel, m: commands.Basic.Recover) -> None:
    if not m.requeue:
        raise ConnectionError_(NOT_IMPLEMENTED, "requeue=false", (60, 110))
    ch.recover()
    ch.output.send_method(commands.Basic.RecoverOk())


def recover_async(ch: Channel, m: commands.Basic.RecoverAsync) -> None:
    if not m.requeue:
        raise ConnectionError_(NOT_IMPLEMENTED, "requeue=false", (60, 100))
    ch.recover()


HANDLERS: dict[int, Callable[..., None]] = {
    commands.Basic.Qos.index: qos,
    commands.Basic.Consume.index: consume,
    commands.Basic.Cancel.index: cancel,
    commands.Basic.Get.index: get,
    commands.Basic.Recover.index: recover,
    commands.Basic.RecoverAsync.index: recover_async,
}
