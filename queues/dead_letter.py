"""Dead-lettering: ``x-dead-letter-exchange`` / ``x-dead-letter-routing-key``.

Theory of operation
-------------------
A message leaves a queue "dead" for one of four reasons: ``rejected``
(basic.reject / basic.nack with requeue=false), ``expired`` (message TTL),
``maxlen`` (dropped by the length limit, or refused by
``reject-publish-dlx``) and ``delivery_limit`` (returned more often than
``x-delivery-limit``). If the queue has a dead-letter exchange, a *new*
message is published into it: same body, properties re-encoded (the only
place Leveret re-encodes properties) with

* the ``x-death`` array updated as RabbitMQ 3.10 does it: one table per
  {queue, reason}; a repeated {queue, reason} gets ``count`` + 1 and moves to
  the front, otherwise a new table goes first, and the *other* tables follow
  in reverse order (what RabbitMQ 3.10.8 does, seen by
  ``tests/integration/test_differential_semantics.py``: after three hops the
  array is not newest first); a new table has ``count``, ``reason``,
  ``queue``, ``time`` (a timestamp, seconds), ``exchange``, ``routing-keys``
  (the publish routing key plus the ``CC`` keys; ``BCC`` was stripped at
  publish) and ``original-expiration`` when the message had an expiration,
  which is then removed from the properties;
* ``x-first-death-{queue,reason,exchange}``, set on the first death only, and
  ``x-last-death-{queue,reason,exchange}`` set on every death;
* routed with ``x-dead-letter-routing-key`` if set (the ``CC`` header is then
  removed), else with the message's own routing keys.

Cycles: if the message would reach a queue that is already in its x-death
history, and no death since (and including) that queue's was ``rejected``,
the copy for that queue is dropped (RabbitMQ's ``rabbit_dead_letter``
``is_cycle``); a ``rejected`` death never counts as a cycle, since a client
broke it. A missing dead-letter exchange drops the message silently, as do
target queues that refuse it (``reject-publish`` overflow). The queues left are
given the new message through the vhost's ``publish_routed``: the broker's one
publish operation (``broker/publishing.py``), which the routing and cycles here
do not go through, as they are dead-lettering's own.

A message whose headers cannot be decoded (malformed, or nested deeper than
``amqp/field_table.MAX_DEPTH``) is still dead-lettered, without its headers
(the new ones hold only the death record), with one log line: dead-lettering
runs from timers and acks, where an exception would lose the message (it
has already left its queue). Nothing raised here reaches the caller.

Dead-lettering is at-most-once, as in RabbitMQ's classic queues; but the new
entries are recorded through the group commit in the same loop turn as the
removal of the old one, so a persistent message moving between durable
queues is in one store transaction: it is in one place or the other after a
crash, never lost.
"""

from __future__ import annotations

import datetime
import logging
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from pamqp import commands

from leveret.exchanges.router import explain, route
from leveret.model.field_table import Long
from leveret.model.message import Message
from leveret.model.properties import decode_properties, encode_properties

if TYPE_CHECKING:
    from leveret.queues.queue import Queue

log = logging.getLogger(__name__)

REJECTED = "rejected"
EXPIRED = "expired"
MAXLEN = "maxlen"
DELIVERY_LIMIT = "delivery_limit"


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else value


def header_routes(headers: dict[str, Any] | None) -> list[str]:
    """The ``CC`` (and, if still present, ``BCC``) routing keys carried in ``headers``."""
    if not headers:
        return []
    keys: list[str] = []
    for name in ("CC", "BCC"):
        value = headers.get(name)
        if isinstance(value, list):
            keys.extend(_text(v) for v in value if isinstance(v, (str, bytes, bytearray)))
    return keys


def update_x_death(headers: dict[str, Any] | None, queue: str, reason: str, exchange: str,
                   routing_keys: Sequence[str], when: datetime.datetime,
                   original_expiration: str | None = None) -> dict[str, Any]:
    """New headers with this death recorded (a pure function; ``headers`` is not changed)."""
    out = dict(headers or {})
    info: dict[str, Any] = {
        "count": Long(1), "reason": reason, "queue": queue, "time": when, "exchange": exchange,
        "routing-keys": list(routing_keys),
    }
    if original_expiration is not None:
        info["original-expiration"] = original_expiration
    deaths = out.get("x-death")
    if not isinstance(deaths, list):
        out["x-death"] = [info]
        out["x-first-death-exchange"] = exchange
        out["x-first-death-queue"] = queue
        out["x-first-death-reason"] = reason
    else:
        match = None
        others = []
        for death in deaths:
            if (match is None and isinstance(death, dict)
                    and _text(death.get("queue")) == queue and _text(death.get("reason")) == reason):
                match = death
            else:
                others.append(death)
        if match is None:
            entry = info
        else:
            # RabbitMQ keeps the first death's details and only counts this one.
            entry = dict(match)
            count = entry.get("count")
            entry["count"] = Long((count if isinstance(count, int) else 0) + 1)
        out["x-death"] = [dict(sorted(entry.items())), *reversed(others)]
    out["x-last-death-exchange"] = exchange
    out["x-last-death-queue"] = queue
    out["x-last-death-reason"] = reason
    return dict(sorted(out.items()))


def is_cycle(queue: str, deaths: Any) -> bool:
    """Would dead-lettering into ``queue`` close a cycle with no ``rejected`` death in it?

    ``deaths`` is the new message's x-death array, in the order ``update_x_death`` leaves it
    (RabbitMQ's, which the same test runs on).
    """
    if not isinstance(deaths, list):
        return False
    for i, death in enumerate(deaths):
        if isinstance(death, dict) and _text(death.get("queue")) == queue:
            cycle = deaths[:i + 1]
            return all(isinstance(d, dict) and _text(d.get("reason")) != REJECTED for d in cycle)
    return False


_FLAG_CONTENT_TYPE, _FLAG_CONTENT_ENCODING, _FLAG_HEADERS = 0x8000, 0x4000, 0x2000


def properties_without_headers(raw: bytes) -> Any:
    """``raw`` decoded with its headers table skipped by its length (empty if even that fails)."""
    try:
        flags = (raw[0] << 8) | raw[1]
        if flags & 1:  # a second flag word: not Basic's
            return commands.Basic.Properties()
        pos = 2
        for flag in (_FLAG_CONTENT_TYPE, _FLAG_CONTENT_ENCODING):
            if flags & flag:
                pos += 1 + raw[pos]
        if flags & _FLAG_HEADERS:
            end = pos + 4 + int.from_bytes(raw[pos:pos + 4], "big")
            raw = struct.pack(">H", flags & ~_FLAG_HEADERS) + raw[2:pos] + raw[end:]
        return decode_properties(raw)
    except (ValueError, IndexError):
        return commands.Basic.Properties()


def make_message(message: Message, queue: str, reason: str, dlx: str, dlrk: str | None,
                 when: datetime.datetime, keep_headers: bool = True,
                 ) -> tuple[Message, list[str], dict[str, Any]]:
    """The dead-lettered copy of ``message``, its routing keys and its new headers.

    Raises ValueError for properties that cannot be decoded or re-encoded,
    unless ``keep_headers`` is False: then the old headers are dropped unread.
    """
    if keep_headers:
        props = decode_properties(message.raw_properties)  # a fresh object: never the cached one
    else:
        props = properties_without_headers(message.raw_properties)
    headers = props.headers or {}
    death_keys = [message.routing_key, *header_routes(headers)]
    expiration = props.expiration
    headers = update_x_death(headers, queue, reason, message.exchange, death_keys, when,
                             expiration if expiration is not None else None)
    if dlrk is not None:
        keys = [dlrk]
        headers.pop("CC", None)
    else:
        keys = death_keys
    props.headers = headers
    props.expiration = None
    raw = encode_properties(props)
    return Message(dlx, keys[0], raw, message.body), keys, headers


def dead_letter(queue: Queue, message: Message, reason: str) -> None:
    """Publish the dead-lettered copy of ``message`` (which left ``queue``) to its DLX, if any.

    Never raises (see the module docstring): a failure is one log line.
    """
    try:
        _dead_letter(queue, message, reason)
    except Exception as exc:
        log.error("cannot dead-letter a message from %r: %r", queue.name, exc)


def _dead_letter(queue: Queue, message: Message, reason: str) -> None:
    settings = queue.settings
    dlx_name = settings.dead_letter_exchange
    vhost = queue.vhost
    if dlx_name is None or vhost is None:
        return
    exchanges = vhost.exchanges
    exchange = exchanges.get(dlx_name)
    if exchange is None:
        return  # RabbitMQ drops the message silently
    tk = queue.time
    when = datetime.datetime.fromtimestamp(int(tk.wall_clock()), tz=datetime.UTC)
    try:
        dead, keys, headers = make_message(message, queue.name, reason, dlx_name,
                                           settings.dead_letter_routing_key, when)
    except (ValueError, RecursionError) as exc:
        log.warning("dead-lettering a message from %r without its headers: %s",
                    queue.name, exc)
        dead, keys, headers = make_message(message, queue.name, reason, dlx_name,
                                           settings.dead_letter_routing_key, when,
                                           keep_headers=False)
    if exchange.delayed is not None and exchange.delayed.take_dead_letter(dead):
        return  # a delayed exchange keeps it until due (broker/delayed.py)
    if dlx_name:
        targets = cast("list[Queue]", route(exchange, keys[0], headers, exchanges.get, keys[1:]))
    else:  # the default exchange: every routing key names a queue (no bindings to walk)
        targets = []
        for key in keys:
            target = vhost.queues.get(key)
            if target is not None and target not in targets:
                targets.append(target)
    deaths = headers.get("x-death")
    kept = []
    for target in targets:
        if reason != REJECTED and is_cycle(target.name, deaths):
            log.debug("dead-letter cycle: dropping message for %r", target.name)
            continue
        kept.append(target)
    tracer = vhost.tracer
    if tracer is not None and kept:  # tracing off: this test is all it costs
        steps = explain(exchange, keys[0], headers, exchanges.get, keys[1:]) if dlx_name else None
        tracer.dead_lettered(dead, kept, queue.name, reason, steps)
    if kept:
        vhost.publish_routed(dead, kept)
