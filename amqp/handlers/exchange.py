"""exchange.declare / delete / bind / unbind, with RabbitMQ's permission checks
(``broker/permissions.py`` has the table)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pamqp import commands

from leveret.broker.permissions import CONFIGURE, READ, WRITE
from leveret.exchanges import EXCHANGE_TYPES
from leveret.model.errors import (
    ACCESS_REFUSED,
    COMMAND_INVALID,
    NOT_FOUND,
    ChannelError,
    ConnectionError_,
)

if TYPE_CHECKING:
    from leveret.amqp.channel import Channel
    from leveret.exchanges.exchange import Exchange

RESERVED_PREFIX = "amq."


def declare(ch: Channel, m: commands.Exchange.Declare) -> None:
    vhost = ch.vhost
    name = m.exchange
    if name == "":  # even passive, as RabbitMQ
        raise ChannelError(ACCESS_REFUSED, "operation not permitted on the default exchange")
    if m.passive:
        exchange = vhost.get_exchange(name)
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
        exchange = vhost.declare_exchange(name, m.exchange_type, m.durable, m.auto_delete,
                                          m.internal, dict(m.arguments or {}))
    if not m.nowait:
        ch.output.send_durable(ch, commands.Exchange.DeclareOk(), exchange.durable, (40, 10))


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
        # Not found: its deletion may be in a batch not yet committed, so wait as well.
        durable = exchange.durable if exchange is not None else True
        ch.output.send_durable(ch, commands.Exchange.DeleteOk(), durable, (40, 20))


def check_binding(ch: Channel, dest_kind: str, dest: str, source: str) -> None:
    """write on the destination, read on the source (rabbit_channel binding_action)."""
    ch.access.check(WRITE, dest_kind, dest)
    ch.access.check(READ, "exchange", source)


def check_topic_binding(ch: Channel, source: Any, routing_key: str) -> None:
    if ch.access.topics is not None and source.type == "topic":
        ch.access.check_topic(READ, source.name, routing_key)


def binding_source(ch: Channel, name: str, routing_key: str) -> Exchange | None:
    """A binding's source exchange, if it exists. As in rabbit_channel's binding_action,
    the default exchange is refused before any lookup (403 even when the other end is
    missing), and topic permissions are checked when the exchange exists."""
    if not name:
        raise ChannelError(ACCESS_REFUSED, "operation not permitted on the default exchange")
    source = ch.vhost.exchanges.get(name)
    if source is not None:
        check_topic_binding(ch, source, routing_key)
    return source


def bind(ch: Channel, m: commands.Exchange.Bind) -> None:
    """The source is looked up before the destination (404 names the source first)."""
    vhost = ch.vhost
    check_binding(ch, "exchange", m.destination, m.source)
    if not m.destination:
        raise ChannelError(ACCESS_REFUSED, "operation not permitted on the default exchange")
    source = binding_source(ch, m.source, m.routing_key)
    if source is None:
        raise ChannelError(NOT_FOUND, f"no {vhost.describe_exchange(m.source)}")
    dest = vhost.get_exchange(m.destination)
    vhost.bind(source, dest, m.routing_key, dict(m.arguments or {}))
    if not m.nowait:
        ch.output.send_durable(ch, commands.Exchange.BindOk(), source.durable and dest.durable, (40, 30))


def unbind(ch: Channel, m: commands.Exchange.Unbind) -> None:
    vhost = ch.vhost
    check_binding(ch, "exchange", m.destination, m.source)
    if not m.destination:
        raise ChannelError(ACCESS_REFUSED, "operation not permitted on the default exchange")
    source = binding_source(ch, m.source, m.routing_key)
    dest = vhost.exchanges.get(m.destination)
    durable = True  # not found: the binding may be gone in a batch not yet committed
    if dest is not None and source is not None:
        vhost.unbind(source, dest, m.routing_key, dict(m.arguments or {}))
        durable = source.durable and dest.durable
    if not m.nowait:
        ch.output.send_durable(ch, commands.Exchange.UnbindOk(), durable, (40, 40))


HANDLERS: dict[int, Callable[..., None]] = {
    commands.Exchange.Declare.index: declare,
    commands.Exchange.Delete.index: delete,
    commands.Exchange.Bind.index: bind,
    commands.Exchange.Unbind.index: unbind,
}
