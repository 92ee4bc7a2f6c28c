"""queue.declare / bind / unbind / purge / delete."""

from __future__ import annotations

import base64
import os
from typing import TYPE_CHECKING

from pamqp import commands

from leveret.model.errors import (
    ACCESS_REFUSED,
    NOT_FOUND,
    PRECONDITION_FAILED,
    RESOURCE_LOCKED,
    ChannelError,
)
from leveret.broker.reply_to import PSEUDO_QUEUE
from leveret.broker.vhost import QUEUE_EQUIVALENCE_ARGS, check_arguments_equivalent
from leveret.queues import queue_types
from leveret.queues.arguments import validate_queue_arguments
from leveret.queues.queue import Queue

if TYPE_CHECKING:
    from leveret.amqp.channel import Channel

RESERVED_PREFIX = "amq."


def generate_name(prefix: str = "amq.gen-") -> str:
    """RabbitMQ-style server-generated name: prefix + 22 url-safe base64 characters."""
    return prefix + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


def resolve_name(ch: Channel, name: str) -> str:
    """An empty queue name means the channel's last declared queue."""
    if name:
        return name
    if ch.last_queue_name is None:
        raise ChannelError(NOT_FOUND, "no previously declared queue")
    return ch.last_queue_name


def check_exclusive(ch: Channel, queue: Queue) -> None:
    """Only the declaring connection may use an exclusive queue (405 for the others)."""
    owner = queue.exclusive_owner
    if owner is not None and owner is not ch.connection:
        raise ChannelError(RESOURCE_LOCKED, locked_text(ch, queue))


def locked_text(ch: Channel, queue: Queue) -> str:
    return (f"cannot obtain exclusive access to locked {ch.vhost.describe_queue(queue.name)}. "
            "It could be originally declared on another connection or the exclusive "
            "property value does not match that of the original declaration.")


def lookup(ch: Channel, name: str) -> Queue:
    queue = ch.vhost.get_queue(resolve_name(ch, name))
    check_exclusive(ch, queue)
    return queue


def declare(ch: Channel, m: commands.Queue.Declare) -> None:
    vhost = ch.vhost
    name = m.queue
    if name.startswith(PSEUDO_QUEUE):
        # Direct reply-to names, passive or not: nothing is created (reply_to.py).
        if not vhost.reply_to.exists(name):
            raise vhost.reply_to.not_found(name, vhost.name)
        ch.last_queue_name = name
        if not m.nowait:
            ch.send_method(commands.Queue.DeclareOk(queue=name, message_count=0, consumer_count=1))
        return
    if m.passive:
        # No "last declared queue" shortcut here: RabbitMQ 3.10 answers a passive
        # declare of "" with 404 "no queue '' in vhost '/'".
        queue = vhost.get_queue(name)
        check_exclusive(ch, queue)
    else:
        server_named = not name
        if not name:
            name = generate_name()
        elif name.startswith(RESERVED_PREFIX):
            raise ChannelError(ACCESS_REFUSED,
                               f"queue name '{name}' contains reserved prefix 'amq.*'")
        arguments = dict(m.arguments or {})
        validate_queue_arguments(arguments, vhost.describe_queue(name))
        queue = vhost.queues.get(name)
        if queue is not None:
            check_exclusive(ch, queue)
            _check_equivalent(ch, queue, m, arguments)
        else:
            # Only for new queues: RabbitMQ checks an existing one's equivalence first.
            queue_types.check_declare(queue_types.queue_type(arguments), server_named=server_named,
                                      durable=m.durable, exclusive=m.exclusive,
                                      auto_delete=m.auto_delete, arguments=arguments,
                                      what=vhost.describe_queue(name))
            # Exclusive + durable: RabbitMQ makes an exclusive transient queue.
            durable = m.durable and not m.exclusive
            queue = Queue(vhost, name, durable=durable,
                          exclusive_owner=ch.connection if m.exclusive else None,
                          auto_delete=m.auto_delete, arguments=arguments)
            vhost.add_queue(queue)
            if m.exclusive:
                ch.connection.exclusive_queues.append(queue)
    queue.touch()  # renews an x-expires lease (RabbitMQ: the stat in every declare)
    ch.last_queue_name = queue.name
    if not m.nowait:
        ch.send_method(commands.Queue.DeclareOk(queue=queue.name, message_count=queue.message_count,
                                                consumer_count=queue.consumer_count))


def _check_equivalent(ch: Channel, queue: Queue, m: commands.Queue.Declare,
                      arguments: dict) -> None:
    what = ch.vhost.describe_queue(queue.name)
    if m.exclusive != queue.exclusive:
        raise ChannelError(RESOURCE_LOCKED, locked_text(ch, queue))
    durable = m.durable and not m.exclusive
    for arg, received, current in (
        ("durable", durable, queue.durable),
        ("auto_delete", m.auto_delete, queue.auto_delete),
    ):
        if received != current:
            raise ChannelError(
                PRECONDITION_FAILED,
                f"inequivalent arg '{arg}' for {what}: received '{str(received).lower()}' "
                f"but current is '{str(current).lower()}'",
            )
    names = QUEUE_EQUIVALENCE_ARGS
    if queue_types.queue_type(arguments) == queue_types.queue_type(queue.arguments):
        # No x-queue-type means classic: 3.10 lets "classic" and none redeclare each other.
        names = tuple(n for n in names if n != "x-queue-type")
    check_arguments_equivalent(names, arguments, queue.arguments, what)


def bind(ch: Channel, m: commands.Queue.Bind) -> None:
    queue = lookup(ch, m.queue)
    exchange = ch.vhost.get_exchange(m.exchange)
    ch.vhost.bind(exchange, queue, m.routing_key, dict(m.arguments or {}))
    if not m.nowait:
        ch.send_method(commands.Queue.BindOk())


def unbind(ch: Channel, m: commands.Queue.Unbind) -> None:
    vhost = ch.vhost
    queue = vhost.queues.get(resolve_name(ch, m.queue))
    exchange = vhost.exchanges.get(m.exchange)
    if queue is not None and exchange is not None:
        check_exclusive(ch, queue)
        vhost.unbind(exchange, queue, m.routing_key, dict(m.arguments or {}))
    ch.send_method(commands.Queue.UnbindOk())


def purge(ch: Channel, m: commands.Queue.Purge) -> None:
    queue = lookup(ch, m.queue)
    count = queue.purge()
    if not m.nowait:
        ch.send_method(commands.Queue.PurgeOk(message_count=count))


def delete(ch: Channel, m: commands.Queue.Delete) -> None:
    vhost = ch.vhost
    queue = vhost.queues.get(resolve_name(ch, m.queue))
    count = 0
    if queue is not None:
        check_exclusive(ch, queue)
        if m.if_unused and queue.consumers:
            raise ChannelError(PRECONDITION_FAILED, f"{vhost.describe_queue(queue.name)} in use")
        if m.if_empty and queue.message_count:
            raise ChannelError(PRECONDITION_FAILED,
                               f"{vhost.describe_queue(queue.name)} not empty")
        count = vhost.delete_queue(queue)
    if not m.nowait:
        ch.send_method(commands.Queue.DeleteOk(message_count=count))


HANDLERS = {
    commands.Queue.Declare.index: declare,
    commands.Queue.Bind.index: bind,
    commands.Queue.Unbind.index: unbind,
    commands.Queue.Purge.index: purge,
    commands.Queue.Delete.index: delete,
}
