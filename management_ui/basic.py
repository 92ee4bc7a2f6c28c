"""basic.publish and basic.get over HTTP: ``POST /api/exchanges/{vhost}/{x}/publish`` and
``POST /api/queues/{vhost}/{q}/get``.

Theory of operation
-------------------
RabbitMQ's plugin (``rabbit_mgmt_wm_exchange_publish``, ``…_queue_get``) parses
the body, opens an AMQP channel as the requesting user and runs basic.publish
or basic.get on it; what refuses the request decides the answer's shape. The
order below was observed on RabbitMQ 3.10.8, one refusal at a time, and is
pinned by ``tests/integration/test_management_api.py`` (both brokers).

Publish:

1. a key missing: 400 ``[{key_missing,routing_key}]`` (routing_key, payload,
   payload_encoding, properties); a payload that is no string: 400
   ``payload_not_string``;
2. no such vhost, or no permissions there (an administrator): 401
   ``not_authorised`` ``Access refused.`` (the channel cannot open,
   ``rights.channel_vhost``);
3. properties in wire order, unknown names ignored: 400 with an Erlang term
   as a JSON list, ``["not_int","priority"]`` / ``["not_string","type"]``,
   or ``null_not_allowed`` for a null anywhere in ``headers``; then the
   payload: ``["unsupported_encoding",…]``, ``["not_base64",…]``;
4. everything the channel checks, in ``rabbit_channel``'s order, answered
   400 with the channel's close reason, code first (``router.channel_closed``):
   write permission (``rights.check_publish``), the exchange
   (``404 NOT_FOUND - no exchange 'x' in vhost '/'``), internal, topic
   permission, ``user_id`` (``impersonator`` exempt), ``expiration``, CC/BCC,
   and ``reply_to = amq.rabbitmq.reply-to`` (an HTTP publish has no reply
   consumer). The checks are the channel's own (``broker/publish_props.py``);
5. the broker's one publish operation (``broker/publishing.py``), as a channel in
   confirm mode: a ``reject-publish`` queue that refuses the message (even if
   another queue took it), or a store that fails to commit it, is the nack's 400
   ``rejected Unable to publish message. Check queue limits.``; otherwise
   ``{"routed": …}`` comes once a persistent message in a durable queue is
   committed, and once the queues it went to are no longer behind their
   consumers (flow control holds an HTTP publisher back as it does a channel).

Get runs the broker's basic.get (``broker/basic_get.py``) ``count`` times, then
settles every message as ``ackmode`` says.

Get: a key missing (400); no channel (401 ``Access refused.``, as above); an
unknown ``encoding`` (400); read permission (401 ``not_authorised`` with the
close reason, ``rights.check_get``); no such queue: 404 ``not_found``
``NOT_FOUND - no queue 'q' in vhost '/'``; another connection's exclusive
queue: 400 with the close reason.

Where Leveret differs: an unknown ``ackmode``, and ``headers`` or
``properties`` that are no object, answer 400 (RabbitMQ 500s, or takes a
list of headers as none); a string ``count`` is accepted; a value the wire
cannot carry (``priority`` 300, a negative ``timestamp``) or a
``delivery_mode`` other than 1 or 2 is 400 ``invalid properties: …`` (RabbitMQ
keeps the first two unencoded, and answers ``406 … {delivery_mode_unknown,7}``
to the last); an empty string property is left off the message (pamqp's
encoding; RabbitMQ keeps it, and still checks an empty ``user_id`` or
``expiration``, as ``_checked`` does here).
"""

from __future__ import annotations

import base64
import binascii
import datetime
from typing import Any

from aiohttp import web
from pamqp import commands

from leveret.broker import publish_props
from leveret.broker.basic_get import basic_get
from leveret.broker.publishing import AwaitingOrigin, basic_publish
from leveret.broker.reply_to import no_reply_consumer
from leveret.management_ui import rights
from leveret.management_ui.router import (
    ApiError,
    Request,
    bad_request,
    channel_closed,
    json_response,
)
from leveret.management_ui.views import jsonable
from leveret.model.errors import NOT_FOUND, ChannelError, ConnectionError_
from leveret.model.message import Message
from leveret.model.object_stats import (
    ExchangeCounters,
    QueueCounters,
    as_message_stats,
    channel_totals,
)
from leveret.model.properties import decode_properties, encode_properties
from leveret.model.stats import MessageStats

__all__ = ["ACK_MODES", "PROPERTY_NAMES", "get", "properties_json", "publish"]

ACK_MODES = ("ack_requeue_true", "reject_requeue_true", "ack_requeue_false",
             "reject_requeue_false")
ENCODINGS = ("auto", "base64")
# basic's properties in wire order: RabbitMQ validates them in this order.
PROPERTY_NAMES = ("content_type", "content_encoding", "headers", "delivery_mode", "priority",
                  "correlation_id", "reply_to", "expiration", "message_id", "timestamp",
                  "type", "user_id", "app_id", "cluster_id")
INT_PROPERTIES = ("delivery_mode", "priority", "timestamp")
PUBLISH_KEYS = ("routing_key", "payload", "payload_encoding", "properties")
GET_KEYS = ("ackmode", "encoding", "count")
UNSUPPORTED_ENCODING = "Unsupported encoding. Please use auto or base64."
# A publish a queue refused (reject-publish) or the store lost: RabbitMQ's answer to the nack.
REJECTED = "rejected Unable to publish message. Check queue limits."


def _key_missing(body: dict[str, Any], keys: tuple[str, ...]) -> None:
    for key in keys:
        if key not in body:
            raise bad_request(f"[{{key_missing,{key}}}]")


def _int(value: Any, what: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise bad_request(f"{what} must be an integer") from None


# -- publish -----------------------------------------------------------------------------------

def encode_json_properties(props: Any) -> bytes:
    """The JSON ``properties`` as the wire's property list (RabbitMQ's texts, see above)."""
    if not isinstance(props, dict):
        raise bad_request("properties must be an object")
    kwargs: dict[str, Any] = {}
    for key in PROPERTY_NAMES:
        if key not in props:
            continue
        value = props[key]
        if key in INT_PROPERTIES:
            if not isinstance(value, int) or isinstance(value, bool):
                raise bad_request(["not_int", key])
        elif key == "headers":
            if not isinstance(value, dict):
                raise bad_request("headers must be an object")
            if _has_null(value):
                raise bad_request("null_not_allowed")
        elif not isinstance(value, str):
            raise bad_request(["not_string", key])
        kwargs[key] = value
    if "timestamp" in kwargs:  # pamqp wants a datetime
        try:
            kwargs["timestamp"] = datetime.datetime.fromtimestamp(kwargs["timestamp"],
                                                                  tz=datetime.UTC)
        except (ValueError, OverflowError, OSError) as exc:
            raise bad_request(f"invalid properties: {exc}") from None
    try:
        return encode_properties(commands.Basic.Properties(**kwargs))
    except (ValueError, TypeError) as exc:
        raise bad_request(f"invalid properties: {exc}") from None


def _has_null(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        return any(_has_null(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_null(v) for v in value)
    return False


def _payload(payload: str, encoding: Any) -> bytes:
    if encoding == "string":
        return payload.encode()
    if encoding == "base64":
        try:  # Erlang's base64:decode skips white space, and nothing else
            return base64.b64decode("".join(payload.split()), validate=True)
        except binascii.Error:
            raise bad_request(["not_base64", payload]) from None
    raise bad_request(["unsupported_encoding", encoding])


def _checked(req: Request, props: dict[str, Any],
             message: Message) -> tuple[Message, tuple[str, ...]]:
    """What basic.publish checks once it has the exchange, in rabbit_channel's order; the
    message to route (BCC removed) and its CC/BCC keys. ChannelError when refused.

    ``user_id`` and ``expiration`` are read from the JSON ``props``: an empty one is set
    (and refused) in RabbitMQ, while pamqp leaves empty strings off the wire."""
    publish_props.check_user_id(props.get("user_id"), req.user, req.state.broker.users)
    if "expiration" in props:
        publish_props.check_expiration(props["expiration"])

    def reply_name() -> str:
        raise no_reply_consumer()

    if publish_props.needs_work(message.raw_properties):
        return publish_props.prepare(message, reply_name)
    return message, ()


async def publish(req: Request) -> web.Response:
    """Publish one message through the broker's publish operation; ``{"routed": bool}`` once
    it is safe, as a confirm would say (after its commit, and once the queues it went to are
    no longer behind their consumers); 400 ``rejected`` as RabbitMQ when a queue refused it."""
    body = await req.body()
    _key_missing(body, PUBLISH_KEYS)
    payload = body["payload"]
    if not isinstance(payload, str):
        raise bad_request("payload_not_string")
    vhost = rights.channel_vhost(req)
    props = body["properties"] or {}
    raw_props = encode_json_properties(props)
    data = _payload(payload, body["payload_encoding"])
    name = req.params["name"]
    routing_key = str(body["routing_key"])
    access = rights.check_publish(req, vhost, name)  # before the lookup
    origin = AwaitingOrigin(req.user)
    counters = ExchangeCounters()
    try:
        exchange = vhost.get_exchange("" if name == "amq.default" else name)
        vhost.check_not_internal(exchange)
        rights.check_topic_publish(access, exchange, routing_key)
        message, extra = _checked(req, props, Message(exchange.name, routing_key, raw_props,
                                                      data))
        out = basic_publish(vhost, message, extra, False, counters, origin)
    except ChannelError as exc:
        raise channel_closed(exc) from None
    finally:  # the vhost's counters of channel-less work, and the exchange's
        vhost.closed_channel_stats.add(channel_totals((counters,), (), MessageStats()))
        req.state.exchange_tally.add(vhost.name, "" if name == "amq.default" else name,
                                     counters)
    try:
        if out.refused or (out.held and not await vhost.log.committed()):
            raise bad_request(REJECTED)  # a nack, in RabbitMQ's confirm-mode channel
        await origin.caught_up()
    finally:
        origin.leave()
    return json_response({"routed": out.routed})


# -- get ---------------------------------------------------------------------------------------

async def get(req: Request) -> web.Response:
    """Get up to ``count`` messages, then ack or reject them all as ``ackmode`` says."""
    body = await req.body()
    _key_missing(body, GET_KEYS)
    vhost = rights.channel_vhost(req)
    ackmode = str(body["ackmode"])
    if ackmode not in ACK_MODES:
        raise bad_request(f"invalid ackmode '{ackmode}'")  # RabbitMQ 3.10 answers 500 here
    encoding = str(body["encoding"])
    if encoding not in ENCODINGS:
        raise bad_request(UNSUPPORTED_ENCODING)
    count = _int(body["count"], "count")
    truncate = _int(body["truncate"], "truncate") if body.get("truncate") not in (None, "") else None
    name = req.params["name"]
    rights.check_get(req, vhost, name)  # before the lookup, as basic.get
    try:
        queue = vhost.queue_for(name, None)
    except ChannelError as exc:
        if exc.code == NOT_FOUND:
            raise ApiError(404, "not_found", exc.reply_text) from None
        raise channel_closed(exc) from None  # another connection's exclusive queue
    counters = QueueCounters()
    taken = []
    out = []
    for _ in range(max(count, 0)):
        try:
            got = basic_get(queue, False, counters, vhost.tracer, req.user, None)
        except ConnectionError_ as exc:  # a stream: RabbitMQ 3.10's text carries the code
            raise ApiError(400, "bad_request", f"{int(exc.code)} {exc.detail}") from None
        if got is None:
            break
        taken.append(got.entry)
        out.append(_message_json(got.entry.message, got.redelivered, got.message_count,
                                 encoding, truncate))
    # RabbitMQ gets them all on one channel, then settles: requeued ones come back in order.
    requeue = ackmode.endswith("requeue_true")
    tracer = vhost.tracer
    for entry in taken:
        if tracer is not None and requeue:
            tracer.requeued(queue.name, entry.message, None, "", "get " + ackmode)
        elif tracer is not None:
            tracer.settled("ack" if ackmode.startswith("ack") else "reject", queue.name,
                           entry.message, None, "", None if ackmode.startswith("ack") else False)
        if requeue:
            queue.requeue(entry)
        elif ackmode.startswith("ack"):
            counters.ack += 1
            queue.settle(entry)
        else:
            queue.reject(entry)
    vhost.closed_channel_stats.add(as_message_stats(counters))
    if requeue and taken:
        queue.dispatch()
    return json_response(out)


def _message_json(message: Message, redelivered: bool, remaining: int, encoding: str,
                  truncate: int | None) -> dict[str, Any]:
    body = message.body
    payload_bytes = len(body)
    if truncate is not None:
        body = body[:truncate]
    payload: str
    payload_encoding = "string"
    if encoding == "auto":
        try:
            payload = body.decode("utf-8")
        except UnicodeDecodeError:
            payload, payload_encoding = base64.b64encode(body).decode(), "base64"
    else:
        payload, payload_encoding = base64.b64encode(body).decode(), "base64"
    return {
        "payload_bytes": payload_bytes, "redelivered": redelivered,
        "exchange": message.exchange, "routing_key": message.routing_key,
        "message_count": remaining, "properties": properties_json(message),
        "payload": payload, "payload_encoding": payload_encoding,
    }


def properties_json(message: Message, keep: bool = True) -> dict[str, Any]:
    """The message's properties as JSON; ``keep=False`` decodes without caching the result
    on the message (a peek leaves messages as they were, memory included)."""
    try:
        props = message.properties if keep else decode_properties(message.raw_properties)
    except ValueError:
        return {}
    out: dict[str, Any] = {}
    for name in PROPERTY_NAMES:
        value = getattr(props, name, None)
        if value is None or value == "" or (name == "headers" and not value):
            continue
        out[name] = jsonable(value)
    return out
