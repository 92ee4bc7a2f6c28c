"""queue.declare / bind / unbind / purge / delete, with RabbitMQ's permission checks
(``broker/permissions.py`` has the table; a check comes before the lookup, as in
rabbit_channel, so a refused name is 403 whether or not it exists)."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from pamqp import commands

from leveret.amqp.handlers.exchange import binding_source, check_binding
from leveret.broker.permissions import CONFIGURE, READ, WRITE
from leveret.broker.reply_to import PSEUDO_QUEUE
from leveret.model.errors import NOT_FOUND, ChannelError
from leveret.queues.queue import Queue

if TYPE_CHECKING:
    from leveret.amqp.channel import Channel


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


def lookup(ch: Channel, name: str) -> Queue:
    return ch.vhost.queue_for(resolve_name(ch, name), ch.connection)


def readable(ch: Channel, name: str) -> Queue:
    """consume / get / purge: read on the queue, then the queue."""
    name = resolve_name(ch, name)
    ch.access.check(READ, "queue", name)
    return ch.vhost.queue_for(name, ch.connection)


def declare(ch: Channel, m: commands.Queue.Declare) -> None:
    vhost = ch.vhost
    name = m.queue
    if name.startswith(PSEUDO_QUEUE):
        # Direct reply-to names, passive or not: nothing is created (reply_to.py).
        if not vhost.reply_to.exists(name):
            raise vhost.reply_to.not_found(name, vhost.name)
        ch.last_queue_name = name
        if not m.nowait:
            ch.output.send_method(commands.Queue.DeclareOk(queue=name, message_count=0, consumer_count=1))
        return
    if m.passive:
        # No "last declared queue" shortcut here: RabbitMQ 3.10 answers a passive
        # declare of "" with 404 "no queue '' in vhost '/'".
        queue = vhost.queue_for(name, ch.connection)
    else:
        name = name or generate_name()
        ch.access.check(CONFIGURE, "queue", name)
        dlx = (m.arguments or {}).get("x-dead-letter-exchange")
        if name not in vhost.queues and isinstance(dlx, str):
            ch.access.check(READ, "queue", name)
            ch.access.check(WRITE, "exchange", dlx)
        queue, created = vhost.declare_queue(
            name, durable=m.durable, exclusive=m.exclusive,
            auto_delete=m.auto_delete, arguments=dict(m.arguments or {}),
            owner=ch.connection, server_named=not m.queue)
        if created and m.exclusive:
            ch.connection.exclusive_queues.add(queue)
    queue.touch()  # renews an x-expires lease (RabbitMQ: the stat in every declare)
    ch.last_queue_name = queue.name
    if not m.nowait:
        ch.output.send_durable(ch, commands.Queue.DeclareOk(queue=queue.name, message_count=queue.message_count,
                                                 consumer_count=queue.consumer_count),
                        queue.durable, (50, 10))


def bind(ch: Channel, m: commands.Queue.Bind) -> None:
    """rabbit_channel's binding_action and rabbit_binding:add, in their order: permissions,
    the default exchange (403), the exchange then the queue (404), the binding's own
    arguments (406), and only then another connection's exclusive queue (405)."""
    vhost = ch.vhost
    name = resolve_name(ch, m.queue)
    check_binding(ch, "queue", name, m.exchange)
    exchange = binding_source(ch, m.exchange, m.routing_key)
    if exchange is None:
        raise ChannelError(NOT_FOUND, f"no {vhost.describe_exchange(m.exchange)}")
    queue = vhost.get_queue(name)
    arguments = dict(m.arguments or {})
    exchange.matcher.validate_binding(m.routing_key, arguments)
    vhost.check_exclusive(queue, ch.connection)
    vhost.bind(exchange, queue, m.routing_key, arguments)
    if not m.nowait:
        ch.output.send_durable(ch, commands.Queue.BindOk(), exchange.durable and queue.durable, (50, 20))


def unbind(ch: Channel, m: commands.Queue.Unbind) -> None:
    """Removing what is not there is unbind-ok, as in rabbit_binding:remove: a missing
    exchange, queue or binding; exclusivity is checked only for a binding that exists
    (RabbitMQ 3.10 answers unbind-ok to another connection's exclusive queue then)."""
    vhost = ch.vhost
    name = resolve_name(ch, m.queue)
    check_binding(ch, "queue", name, m.exchange)
    exchange = binding_source(ch, m.exchange, m.routing_key)
    queue = vhost.queues.get(name)
    # Not found: the binding may be gone in a batch not yet committed, so wait as well.
    durable = True
    if queue is not None and exchange is not None:
        arguments = dict(m.arguments or {})
        if exchange.matcher.has_binding(queue, m.routing_key, arguments):
            vhost.check_exclusive(queue, ch.connection)
            vhost.unbind(exchange, queue, m.routing_key, arguments)
        durable = exchange.durable and queue.durable
    ch.output.send_durable(ch, commands.Queue.UnbindOk(), durable, (50, 50))


def purge(ch: Channel, m: commands.Queue.Purge) -> None:
    queue = readable(ch, m.queue)
    count = ch.vhost.purge_queue(queue)
    if not m.nowait:
        ch.output.send_durable(ch, commands.Queue.PurgeOk(message_count=count), queue.durable, (50, 30))


def delete(ch: Channel, m: commands.Queue.Delete) -> None:
    vhost = ch.vhost
    name = resolve_name(ch, m.queue)
    ch.access.check(CONFIGURE, "queue", name)
    queue = vhost.queues.get(name)
    count = 0
    durable = True  # not found: its deletion may be in a batch not yet committed
    if queue is not None:
        vhost.check_exclusive(queue, ch.connection)
        count = vhost.delete_queue_checked(queue, m.if_unused, m.if_empty)
        durable = queue.durable
    if not m.nowait:
        ch.output.send_durable(ch, commands.Queue.DeleteOk(message_count=count), durable, (50, 40))


HANDLERS: dict[int, Callable[..., None]] = {
    commands.Queue.Declare.index: declare,
    commands.Queue.Bind.index: bind,
    commands.Queue.Unbind.index: unbind,
    commands.Queue.Purge.index: purge,
    commands.Queue.Delete.index: delete,
}
