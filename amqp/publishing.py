"""The publish path of a channel: basic.publish's content → checks → route → enqueue,
and the publisher confirms that follow.

Theory of operation
-------------------
``Channel`` assembles the content (``assembler.py``) and hands the complete
message to ``_complete``: publish permissions (one set lookup once allowed);
then, for a message with any property (a flag word other than zero), a check
that the property list is well-formed (``properties.check_properties``, once
per distinct list a channel sees): malformed properties are never relayed, and
close the connection with 541 INTERNAL_ERROR as they crash a RabbitMQ 3.10
channel; then the ``user-id`` and ``expiration`` checks (only when their flags
are set), CC/BCC and direct reply-to (``broker/publish_props.py``); then ``publish``:
the broker's one publish operation (``broker/publishing.basic_publish``: route, enqueue in
every queue, count, trace, flow control, with this channel as its ``Origin``), and what is
the channel's own: confirm or return as RabbitMQ does. A
persistent message in a durable queue is confirmed after its group commit
(``confirms_settled``); confirms go out in one batch per loop turn
(``flush_confirms``), behind any reply held for a commit (``held_output.py``).

``Publisher`` is a base of ``Channel``, so the hot path costs no extra hop.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast

from leveret.amqp import fastpath
from leveret.amqp.assembler import Publish
from leveret.amqp.held_output import HeldOutput
from leveret.broker import publish_props, publishing
from leveret.broker.permissions import WRITE, Access
from leveret.broker.publishing import basic_publish
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
from leveret.model.properties import check_properties
from leveret.model.stats import MessageStats

if TYPE_CHECKING:
    from leveret.amqp.channel import Channel
    from leveret.queues.queue import Queue

log = logging.getLogger(__name__)

_ACCEPTED = publishing.ACCEPTED
_NO_PROPERTIES = b"\x00\x00"  # the flag word alone, all clear
# Property lists a channel has found well-formed: publishers repeat theirs (content type,
# delivery mode, the same headers), so each distinct one is checked once; bounded.
VALID_PROPERTIES_KEPT = 64
# Property flags that make _complete work: user-id, expiration, and headers (CC/BCC) or
# reply-to (direct reply-to), as the high and low byte of the first flag word.
_CHECKED_HIGH = (FLAG_EXPIRATION | FLAG_HEADERS | FLAG_REPLY_TO) >> 8
_CHECKED_LOW = FLAG_USER_ID


def decoded_properties(message: Message) -> Any:
    """The message's properties, decoded on first use: malformed ones are 501 FRAME_ERROR."""
    try:
        return message.properties
    except ValueError as exc:
        raise ConnectionError_(FRAME_ERROR, f"malformed content header: {exc}", (60, 40)) from exc


class Publisher(HeldOutput):
    """basic.publish from content to queues, and the confirms it owes."""

    access: Access
    _counted: MessageStats
    exchange_stats: dict[str, ExchangeCounters]
    tx: list[Any] | None
    tx_durable: bool | None
    valid_properties: set[bytes]

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
        extra: tuple[str, ...] = ()
        if props != _NO_PROPERTIES:  # a message without properties pays nothing more
            message, extra = self._check_properties(message)
        if self.tx is not None:
            self.vhost_exchange(exchange)  # 404 at publish time, as RabbitMQ
            self.tx.append((self.publish, (message, mandatory, extra)))
        else:
            self.publish(message, mandatory, extra)

    def _check_properties(self, message: Message) -> tuple[Message, tuple[str, ...]]:
        """Malformed properties close the connection (before anything is relayed); then
        the user-id and expiration checks, CC/BCC and direct reply-to."""
        props = message.raw_properties
        valid = self.valid_properties
        if props not in valid:
            try:
                check_properties(props)
            except ValueError as exc:
                log.warning("connection %s, channel %d: malformed message properties: %s",
                            self.connection.name, self.number, exc)
                raise ChannelCrash(f"malformed message properties: {exc}") from exc
            if len(valid) >= VALID_PROPERTIES_KEPT:
                valid.clear()
            valid.add(props)
        # One test of the flag words for each property that asks for work below.
        if not (props[0] & _CHECKED_HIGH or props[1] & _CHECKED_LOW):
            return message, ()
        if message.has_user_id:
            connection = self.connection
            publish_props.check_user_id(decoded_properties(message).user_id, connection.user,
                                        connection.broker.users)
        if message.has_expiration:
            publish_props.check_expiration(decoded_properties(message).expiration)
        if publish_props.needs_work(message.raw_properties):
            return publish_props.prepare(
                message, lambda: self.vhost.reply_to.reply_name(cast("Channel", self)))
        return message, ()

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

    def vhost_exchange(self, name: str) -> Any:
        exchange = self.vhost.exchanges.get(name)
        if exchange is None:
            raise ChannelError(NOT_FOUND, f"no exchange '{name}' in vhost '{self.vhost.name}'",
                               (60, 40))
        return exchange

    def publish(self, message: Message, mandatory: bool,
                extra_routing_keys: tuple[str, ...] = ()) -> None:
        """Publish ``message`` (plus its CC/BCC keys) through the broker's one operation
        (``broker/publishing.py``); then confirm or return it as RabbitMQ does."""
        name = message.exchange
        try:  # subscripts, not .get: no method call on the hot path
            counters = self.exchange_stats[name]
        except KeyError:
            counters = self.exchange_stats[name] = ExchangeCounters()
        try:
            out = basic_publish(self.vhost, message, extra_routing_keys, mandatory, counters,
                                self)
        except ValueError as exc:  # properties are decoded lazily, when routing needs them
            raise ConnectionError_(FRAME_ERROR, f"malformed content header: {exc}",
                                   (60, 40)) from exc
        except ChannelError as exc:
            exc.method = (60, 40)
            raise
        confirms = self.confirms
        if out is _ACCEPTED:  # the commonest outcome first
            if confirms is not None:
                counters.confirm += 1
                confirms.publish()
                self.connection.want_flush(self)
            return
        if not out.routed:
            if mandatory:
                self._write(
                    fastpath.encode_return(self.number, 312, "NO_ROUTE", name, message.routing_key)
                )
                self._writelines(
                    fastpath.encode_content(self.number, message.raw_properties, message.body,
                                            self.connection.frame_max)
                )
            if confirms is not None:
                counters.confirm += 1
                confirms.publish()
                self.connection.want_flush(self)
            return
        held = out.held
        if self.tx_durable is not None and held:
            self.tx_durable = True
        if confirms is not None:
            # A persistent message in a durable queue is confirmed after its commit.
            log = self.vhost.log
            if out.refused:  # one refusing queue is enough for a nack, as in RabbitMQ
                confirms.settle(confirms.publish(hold=True), False)
                self.connection.want_flush(self)
            elif held and log.deferred:
                counters.confirm += 1  # decided: acked after the commit (object_stats.py)
                log.hold(self, confirms.publish(hold=True))
            else:
                counters.confirm += 1
                confirms.publish()
                self.connection.want_flush(self)

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
        self._counted.confirm += confirms.confirmed - confirmed
