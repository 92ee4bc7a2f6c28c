"""exchange.declare / delete / bind / unbind, with RabbitMQ's permission checks
(``broker/permissions.py`` has the table)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pamqp import commands

from leveret.model.errors import ACCESS_REFUSED, COMMAND_INVALID, ChannelError, ConnectionError_
from leveret.broker.permissions import CONFIGURE, READ, WRITE
from leveret.exchanges import EXCHANGE_TYPES

if TYPE_CHECKING:
    from leveret.amqp.channel import Channel

RESERVED_PREFIX = "amq."


def declare(ch: Channel, m: commands.Exchange.Declare) -> None:
    vhost = ch.vhost
    name = m.exchange
    if name == "":  # even passive, as RabbitMQ
        raise ChannelError(ACCESS_REFUSED, "operation not permitted on the default exchange")
    if m.passive:
        vhost.get_exchange(name)
    else:
        ch.access.check(CONFIGURE, "exchange", name)
        if name.startswith(RESERVED_PREFIX) and name not in vhost.exchanges:
            raise ChannelError(
                ACCESS_REFUSED,
                f"exchange name '{name}' contains reserved prefix 'amq.*'",
            )
        if m.exchange_type not in EXCHANGE_TYPES:
            raise ConnectionError_(COMMAND_INVALID, f"unknown exchange type '{m.exchange_type}'",
                                   (40, 10))
        alternate = (m.arguments or {}).get("alternate-exchange")
        if name not in vhost.exchanges and isinstance(alternate, str):
            ch.access.check(READ, "exchange", name)
            ch.access.check(WRITE, "exchange", alternate)
        vhost.declare_exchange(name, m.exchange_type, m.durable, m.auto_delete, m.internal,
                               dict(m.arguments or {}))
    if not m.nowait:
        ch.send_method(commands.Exchange.DeclareOk())


def delete(ch: Channel, m: commands.Exchange.Delete) -> None:
    vhost = ch.vhost
    name = m.exchange
    if name == "":
        raise ChannelError(ACCESS_REFUSED, "operation not permitted on the default exchange")
    if name.startswith(RESERVED_PREFIX):
        raise ChannelError(ACCESS_REFUSED,
                           f"deletion of system exchange '{name}' in vhost '{vhost.name}' not allowed")
    ch.access.check(CONFIGURE, "exchange", name)
    exchange = vhost.exchanges.get(name)
    if exchange is not None:
        vhost.delete_exchange(exchange, m.if_unused)
    if not m.nowait:
        ch.send_method(commands.Exchange.DeleteOk())


def check_binding(ch: Channel, dest_kind: str, dest: str, source: str) -> None:
    """write on the destination, read on the source (rabbit_channel binding_action)."""
    ch.access.check(WRITE, dest_kind, dest)
    ch.access.check(READ, "exchange", source)


def check_topic_binding(ch: Channel, source: Any, routing_key: str) -> None:
    if ch.access.topics is not None and source.type == "topic":
        ch.access.check_topic(READ, source.name, routing_key)


def bind(ch: Channel, m: commands.Exchange.Bind) -> None:
    vhost = ch.vhost
    check_binding(ch, "exchange", m.destination, m.source)
    dest = vhost.get_exchange(m.destination)
    source = vhost.get_exchange(m.source)
    vhost.check_not_default(dest)
    check_topic_binding(ch, source, m.routing_key)
    vhost.bind(source, dest, m.routing_key, dict(m.arguments or {}))
    if not m.nowait:
        ch.send_method(commands.Exchange.BindOk())


def unbind(ch: Channel, m: commands.Exchange.Unbind) -> None:
    vhost = ch.vhost
    check_binding(ch, "exchange", m.destination, m.source)
    dest = vhost.exchanges.get(m.destination)
    source = vhost.exchanges.get(m.source)
    if dest is not None and source is not None:
        vhost.check_not_default(dest)
        check_topic_binding(ch, source, m.routing_key)
        vhost.unbind(source, dest, m.routing_key, dict(m.arguments or {}))
    if not m.nowait:
        ch.send_method(commands.Exchange.UnbindOk())


HANDLERS: dict[int, Callable[..., None]] = {
    commands.Exchange.Declare.index: declare,
    commands.Exchange.Delete.index: delete,
    commands.Exchange.Bind.index: bind,
    commands.Exchange.Unbind.index: unbind,
}
