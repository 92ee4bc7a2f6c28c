"""The publish path of a channel: basic.publish's content → checks → route → enqueue,
and the publisher confirms that follow.

Theory of operation
-------------------
``Channel`` assembles the content (``assembler.py``) and hands the complete
message to ``complete``: publish permissions (one set lookup once allowed);
then, for a message with any property (a flag word other than zero), a check
that the property list is well-formed (``properties.check_properties``, once
per distinct list with headers a channel sees): malformed properties are never relayed, and
close the connection with 541 INTERNAL_ERROR as they crash a RabbitMQ 3.10
channel; then the ``user-id`` and ``expiration`` checks (only when their flags
are set), CC/BCC and direct reply-to (``broker/publish_props.py``); then ``publish``:
the broker's one publish operation (``broker/publishing.basic_publish``: route, enqueue in
every queue, count, trace, flow control, with this channel as its ``Origin``), and what is
the channel's own: confirm or return as RabbitMQ does. A
persistent message in a durable queue is confirmed after its group commit
(``confirms_settled``); confirms go out in one batch per loop turn
(``flush_confirms``), behind any reply held for a commit (``held_output.py``).

These are functions of the channel, as ``closing.py``'s are of the connection: the
channel keeps the state (its confirms, its tx list, the property lists it found
well-formed) and answers the broker as the publish's ``Origin``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from leveret.amqp import fastpath
from leveret.amqp.assembler import Publish
from leveret.broker import publish_props, publishing
from leveret.broker.permissions import WRITE, Access
from leveret.model import properties
from leveret.model.errors import (
    FRAME_ERROR,
    NOT_FOUND,
    ChannelCrash,
    ChannelError,
    ConnectionError_,
)
from leveret.model.message import (
    FLAG_EXPIRATION,
    FLAG_HEADERS,
    FLAG_REPLY_TO,
    FLAG_USER_ID,
    Message,
)
from leveret.model.object_stats import ExchangeCounters

if TYPE_CHECKING:
    from leveret.amqp.channel import Channel

log = logging.getLogger(__name__)

_ACCEPTED = publishing.ACCEPTED
_NO_PROPERTIES = b"\x00\x00"  # the flag word alone, all clear
# Property lists with headers a channel has found well-formed, each with whether it asks for
# CC/BCC or direct reply-to work (``needs_work``): publishers repeat theirs (the same
# headers), so each distinct table is walked and searched once; bounded. A list without
# headers is walked every time: its flags and lengths cost less than hashing it, and a
# publisher that sets a new message-id on every message would miss the map anyway.
VALID_PROPERTIES_KEPT = 64
_HEADERS_HIGH = FLAG_HEADERS >> 8
# Property flags that make complete work: user-id, expiration, and headers (CC/BCC) or
# reply-to (direct reply-to), as the high and low byte of the first flag word.
_CHECKED_HIGH = (FLAG_EXPIRATION | FLAG_HEADERS | FLAG_REPLY_TO) >> 8
_CHECKED_LOW = FLAG_USER_ID
_EXPIRATION_HIGH = FLAG_EXPIRATION >> 8


def decoded_properties(message: Message) -> Any:
    """The message's properties, decoded on first use: malformed ones are 501 FRAME_ERROR."""
    try:
        return message.properties
    except ValueError as exc:
        raise ConnectionError_(FRAME_ERROR, f"malformed content header: {exc}", (60, 40)) from exc


def complete(channel: Channel, publish: Publish, props: bytes, body: bytes) -> None:
    """A whole message arrived on ``channel``: check it, then publish (or queue it in tx)."""
    exchange, routing_key, mandatory = publish
    access = channel.access
    if exchange not in access.writable:  # one set lookup once allowed (permissions.py)
        _check_publish(access, exchange)
    if access.topics is not None:
        _check_topic(channel, access, exchange, routing_key)
    # Set only at a message boundary: an alarm may stop reading here, never mid-message.
    channel.connection.has_published = True
    message = Message(exchange, routing_key, props, body)
    extra: tuple[str, ...] = ()
    if props != _NO_PROPERTIES:  # a message without properties pays nothing more
        message, extra = _check_properties(channel, message)
    if channel.tx is not None:
        _vhost_exchange(channel, exchange)  # 404 at publish time, as RabbitMQ
        channel.tx.append((publish_message, (channel, message, mandatory, extra)))
    else:
        publish_message(channel, message, mandatory, extra)


def _check_properties(channel: Channel, message: Message) -> tuple[Message, tuple[str, ...]]:
    """Malformed properties close the connection (before anything is relayed); then
    the user-id and expiration checks, CC/BCC and direct reply-to."""
    props = message.raw_properties
    work = None  # does it ask for CC/BCC or direct reply-to work (None: not known yet)
    if props[0] & _HEADERS_HIGH:  # a table to walk: once per distinct list
        valid = channel.valid_properties
        work = valid.get(props)
        if work is None:
            _check_well_formed(channel, props)
            work = publish_props.needs_work(props)
            if len(valid) >= VALID_PROPERTIES_KEPT:
                valid.clear()
            valid[props] = work
    else:  # flags and lengths only: cheaper to walk than to look up (a new message-id each)
        _check_well_formed(channel, props)
    # One test of the flag words for each property that asks for work below.
    if not (props[0] & _CHECKED_HIGH or props[1] & _CHECKED_LOW):
        return message, ()
    if props[1] & _CHECKED_LOW:  # user-id
        connection = channel.connection
        publish_props.check_user_id(decoded_properties(message).user_id, connection.user,
                                    connection.broker.users)
    if props[0] & _EXPIRATION_HIGH:
        publish_props.check_expiration(decoded_properties(message).expiration)
    if work is None:  # no headers: reply-to alone can ask
        work = publish_props.needs_work(props)
    if work:
        return _prepare(channel, message)
    return message, ()


def _check_well_formed(channel: Channel, props: bytes) -> None:
    try:
        properties.check_properties(props)
    except ValueError as exc:
        log.warning("connection %s, channel %d: malformed message properties: %s",
                    channel.connection.name, channel.number, exc)
        raise ChannelCrash(f"malformed message properties: {exc}") from exc


def _prepare(channel: Channel, message: Message) -> tuple[Message, tuple[str, ...]]:
    """CC/BCC and direct reply-to, the reply name asked for only when needed. The closure is
    here, not in ``_check_properties``: compiled, a function with a closure allocates its
    cell on every call, and that one runs on every publish."""
    return publish_props.prepare(message, lambda: channel.vhost.reply_to.reply_name(channel))


def _check_publish(access: Access, exchange: str) -> None:
    try:
        access.check_publish(exchange)
    except ChannelError as exc:
        exc.method = (60, 40)
        raise


def _check_topic(channel: Channel, access: Access, exchange: str, routing_key: str) -> None:
    ex = channel.vhost.exchanges.get(exchange)
    if ex is not None and ex.type == "topic":
        try:
            access.check_topic(WRITE, exchange, routing_key)
        except ChannelError as exc:
            exc.method = (60, 40)
            raise


def _vhost_exchange(channel: Channel, name: str) -> None:
    if name not in channel.vhost.exchanges:
        raise ChannelError(NOT_FOUND, f"no exchange '{name}' in vhost '{channel.vhost.name}'",
                           (60, 40))


def publish_message(channel: Channel, message: Message, mandatory: bool,
                    extra_routing_keys: tuple[str, ...] = ()) -> None:
    """Publish ``message`` (plus its CC/BCC keys) through the broker's one operation
    (``broker/publishing.py``); then confirm or return it as RabbitMQ does."""
    name = message.exchange
    try:  # subscripts, not .get: no method call on the hot path
        counters = channel.exchange_stats[name]
    except KeyError:
        counters = channel.exchange_stats[name] = ExchangeCounters()
    try:
        out = publishing.basic_publish(channel.vhost, message, extra_routing_keys, mandatory,
                                       counters, channel)
    except ValueError as exc:  # properties are decoded lazily, when routing needs them
        raise ConnectionError_(FRAME_ERROR, f"malformed content header: {exc}",
                               (60, 40)) from exc
    except ChannelError as exc:
        exc.method = (60, 40)
        raise
    confirms = channel.confirms
    if out is _ACCEPTED:  # the commonest outcome first
        if confirms is not None:
            counters.confirm += 1
            confirms.publish()
            channel.connection.want_flush(channel)
        return
    if not out.routed:
        if mandatory:
            number, output = channel.number, channel.output
            output.write(
                fastpath.encode_return(number, 312, "NO_ROUTE", name, message.routing_key))
            output.writelines(fastpath.encode_content(
                number, message.raw_properties, message.body, channel.connection.frame_max))
        if confirms is not None:
            counters.confirm += 1
            confirms.publish()
            channel.connection.want_flush(channel)
        return
    held = out.held
    if channel.tx_durable is not None and held:
        channel.tx_durable = True
    if confirms is not None:
        # A persistent message in a durable queue is confirmed after its commit.
        store_log = channel.vhost.log
        if out.refused:  # one refusing queue is enough for a nack, as in RabbitMQ
            confirms.settle(confirms.publish(hold=True), False)
            channel.connection.want_flush(channel)
        elif held and store_log.deferred:
            counters.confirm += 1  # decided: acked after the commit (object_stats.py)
            store_log.hold(channel, confirms.publish(hold=True))
        else:
            counters.confirm += 1
            confirms.publish()
            channel.connection.want_flush(channel)


def flush_confirms(channel: Channel) -> None:
    """The confirms decided this loop turn, in one batch (behind any held reply)."""
    confirms = channel.confirms
    if confirms is None or channel.closing or channel.output.held is not None:
        return  # behind a held reply: flushed when it goes out
    write = channel.connection.write
    number = channel.number
    confirmed = confirms.confirmed
    for tag, multiple, ok in confirms.drain():
        if ok:
            write(fastpath.encode_ack(number, tag, multiple))
        else:
            write(fastpath.encode_nack(number, tag, multiple, False))
    channel.counted.confirm += confirms.confirmed - confirmed
