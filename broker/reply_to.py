"""Direct reply-to: RPC replies straight to the requester's channel, with no queue.

Theory of operation (RabbitMQ 3.x ``rabbit_channel``; docs/direct-reply-to.md)
---------------------------------------------------------------------------
* A requester consumes the pseudo-queue ``amq.rabbitmq.reply-to`` in no-ack
  mode; a channel has at most one such *reply consumer*. It is not a queue
  consumer: it lives here, not in ``Channel.consumers``.
* Its requests carry ``reply_to = amq.rabbitmq.reply-to``; the channel's
  publish path (``publish_props``) rewrites that to this channel's reply
  name ``amq.rabbitmq.reply-to.<opaque>``.
* A responder publishing to the default exchange with that routing key (or
  CC'ing it) reaches the reply consumer directly: ``deliver`` writes a
  basic.deliver on the requester's channel. At most once: a gone requester
  means the reply is dropped.
* As in RabbitMQ 3.10 (checked against 3.10.x), the pseudo-queue does not
  count as a route: a mandatory reply is delivered *and* returned with 312
  NO_ROUTE, and a confirm is an ack for an unroutable message
  (docs/direct-reply-to.md: "treated as not a queue").
* The delivery tag of a reply is the channel's next tag, not consumed (3.10:
  ``deliver_reply`` sends ``next_tag`` without incrementing it): replies are
  never acked, so no tag is spent on them.
* ``queue.declare`` (passive or not) of a name starting with
  ``amq.rabbitmq.reply-to``: the bare name and a live reply name succeed with
  0 messages and 1 consumer; anything else is 404. Nothing is ever created.

Names are per vhost here (the registry lives on the ``VirtualHost``); RabbitMQ
encodes the channel's pid in the name, which would also reach across vhosts.
"""

from __future__ import annotations

import base64
import os
from typing import Protocol

from leveret.model.errors import NOT_FOUND, PRECONDITION_FAILED, ChannelError
from leveret.model.message import Message


def no_reply_consumer() -> ChannelError:
    """406 for a publish asking for a direct reply from a channel without a reply
    consumer (an HTTP publish never has one)."""
    return ChannelError(PRECONDITION_FAILED, "fast reply consumer does not exist", (60, 40))


class Channel(Protocol):
    """What reply-to needs from an AMQP channel: identity, state, and a way to deliver."""

    closing: bool

    def deliver_reply(self, consumer_tag: str, message: Message) -> None: ...

PSEUDO_QUEUE = "amq.rabbitmq.reply-to"
PREFIX = PSEUDO_QUEUE + "."


class ReplyConsumer:
    __slots__ = ("channel", "name", "tag")

    def __init__(self, tag: str, channel: Channel, name: str) -> None:
        self.tag = tag
        self.channel = channel
        self.name = name


class ReplyTo:
    """One vhost's reply consumers, by channel and by reply name."""

    def __init__(self) -> None:
        self.by_channel: dict[Channel, ReplyConsumer] = {}
        self.by_name: dict[str, ReplyConsumer] = {}

    def consume(self, channel: Channel, tag: str, no_ack: bool) -> ReplyConsumer:
        """Register ``channel``'s reply consumer (406 as RabbitMQ if not allowed)."""
        if not no_ack:
            raise ChannelError(PRECONDITION_FAILED, "reply consumer cannot acknowledge")
        if channel in self.by_channel:
            raise ChannelError(PRECONDITION_FAILED, "reply consumer already set")
        name = PREFIX + base64.urlsafe_b64encode(os.urandom(18)).decode()
        consumer = ReplyConsumer(tag, channel, name)
        self.by_channel[channel] = consumer
        self.by_name[name] = consumer
        return consumer

    def cancel(self, channel: Channel, tag: str) -> bool:
        """basic.cancel: True if ``tag`` was the channel's reply consumer."""
        consumer = self.by_channel.get(channel)
        if consumer is None or consumer.tag != tag:
            return False
        self.release(channel)
        return True

    def release(self, channel: Channel) -> None:
        """The channel closed: its reply name stops existing."""
        consumer = self.by_channel.pop(channel, None)
        if consumer is not None:
            self.by_name.pop(consumer.name, None)

    def reply_name(self, channel: Channel) -> str:
        """What ``reply_to = amq.rabbitmq.reply-to`` becomes on a publish from ``channel``."""
        consumer = self.by_channel.get(channel)
        if consumer is None:
            raise no_reply_consumer()
        return consumer.name

    def exists(self, name: str) -> bool:
        """queue.declare of a reply name: the bare pseudo-queue or a live reply name."""
        return name == PSEUDO_QUEUE or name in self.by_name

    def not_found(self, name: str, vhost: str) -> ChannelError:
        return ChannelError(NOT_FOUND, f"no queue '{name}' in vhost '{vhost}'")

    def deliver(self, name: str, message: Message) -> None:
        """Hand a reply to the requester, if it is still there (at most once)."""
        consumer = self.by_name.get(name)
        if consumer is None:
            return
        channel = consumer.channel
        if channel.closing:
            return
        # The channel's next tag, not consumed: see the module header.
        channel.deliver_reply(consumer.tag, message)
