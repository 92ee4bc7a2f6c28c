"""Write routes: declare/delete exchanges and queues, bindings, purge, close a
connection, publish and get over HTTP, policies.

Every change goes through the broker model's operations API
(``broker/vhost.py``), so the rules and texts are AMQP's: an inequivalent
redeclare is a 400 with the text a channel.close would carry, and the user's
configure / write / read permissions apply as on AMQP (``rights.py``). Input is
lenient as RabbitMQ's is: ``"durable": "true"``, ``"count": "1"``, and the
``vhost``/``name`` keys rabbitmqadmin repeats in the body are accepted.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime
from typing import Any

from aiohttp import web
from pamqp import commands

from leveret.broker import inventory
from leveret.exchanges import EXCHANGE_TYPES
from leveret.management_ui import auth, read, rights, views
from leveret.management_ui.listing import truthy
from leveret.management_ui.router import ApiError, Request, bad_request, json_response, not_found
from leveret.model.errors import ChannelError
from leveret.model.message import Message
from leveret.model.properties import decode_properties, encode_properties
from leveret.queues.entry import PublishResult
from leveret.queues.policy import PolicyError, validate

ACK_MODES = ("ack_requeue_true", "reject_requeue_true", "ack_requeue_false",
             "reject_requeue_false")
# RabbitMQ's default text when a connection is closed from the management UI.
CLOSED_VIA_MANAGEMENT = "Closed via management plugin"


def _created() -> web.Response:
    return web.Response(status=201)


def _no_content() -> web.Response:
    return web.Response(status=204)


def _dict_arg(body: dict[str, Any], key: str) -> dict[str, Any]:
    value = body.get(key) or {}
    if not isinstance(value, dict):
        raise bad_request(f"{key} must be an object")
    return value


def _int(value: Any, what: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise bad_request(f"{what} must be an integer") from None


# -- exchanges and queues --------------------------------------------------------------------

async def put_exchange(req: Request) -> web.Response:
    vhost = read.vhost_of(req)
    body = await req.body()
    name = req.params["name"]
    type_ = str(body.get("type", "direct"))
    if type_ not in EXCHANGE_TYPES:
        raise bad_request(f"unknown exchange type '{type_}'")
    arguments = _dict_arg(body, "arguments")
    existed = name in vhost.exchanges
    rights.check_declare(req, vhost, "exchange", name, arguments.get("alternate-exchange"),
                         existed)
    if name.startswith("amq.") and not existed:
        raise ApiError(401, "not_authorised", "Access refused.")
    vhost.declare_exchange(name, type_, truthy(body.get("durable", False)),
                           truthy(body.get("auto_delete", False)),
                           truthy(body.get("internal", False)), arguments)
    return _no_content() if existed else _created()


async def delete_exchange(req: Request) -> web.Response:
    vhost = read.vhost_of(req)
    exchange = read.exchange_of(req, vhost, req.params["name"])  # amq.default is ""
    if exchange.name == "" or exchange.name.startswith("amq."):
        raise ApiError(401, "not_authorised", "Access refused.")
    rights.check_configure(req, vhost, "exchange", exchange.name)
    vhost.delete_exchange(exchange, truthy(req.query.get("if-unused", "false")))
    return _no_content()


async def put_queue(req: Request) -> web.Response:
    vhost = read.vhost_of(req)
    body = await req.body()
    name = req.params["name"]
    arguments = dict(_dict_arg(body, "arguments"))
    if body.get("queue_type") and "x-queue-type" not in arguments:  # rabbitmqadmin's option
        arguments["x-queue-type"] = str(body["queue_type"])
    existing = vhost.queues.get(name)
    rights.check_declare(req, vhost, "queue", name, arguments.get("x-dead-letter-exchange"),
                         existing is not None)
    if name.startswith("amq."):
        raise ApiError(401, "not_authorised", "Access refused.")
    if existing is not None and existing.exclusive:
        vhost.check_exclusive(existing, object())  # 405 text, as another connection
    _, created = vhost.declare_queue(name, durable=truthy(body.get("durable", False)),
                                     exclusive=False,
                                     auto_delete=truthy(body.get("auto_delete", False)),
                                     arguments=arguments)
    return _created() if created else _no_content()


async def delete_queue(req: Request) -> web.Response:
    vhost = read.vhost_of(req)
    queue = read.queue_of(req, vhost)
    rights.check_configure(req, vhost, "queue", queue.name)
    vhost.check_exclusive(queue, None)  # another connection's exclusive queue: 400, as RabbitMQ
    vhost.delete_queue_checked(queue, truthy(req.query.get("if-unused", "false")),
                               truthy(req.query.get("if-empty", "false")))
    return _no_content()


async def purge_queue(req: Request) -> web.Response:
    vhost = read.vhost_of(req)
    queue = read.queue_of(req, vhost)
    rights.check_read(req, vhost, queue.name)
    vhost.purge_queue(vhost.queue_for(queue.name, None))  # 400 if exclusive
    return _no_content()


# -- bindings ----------------------------------------------------------------------------------

async def post_binding(req: Request) -> web.Response:
    params = req.params
    # Refused before the lookups: a missing source or destination is refused too.
    access = rights.check_binding(req, read.vhost_of(req), params["kind"], params["dest"],
                                  params["source"])
    vhost, source, dest, _ = read.bindings_between(req)
    body = await req.body()
    routing_key = str(body.get("routing_key", ""))
    arguments = _dict_arg(body, "arguments")
    rights.check_topic_binding(access, source, routing_key)
    vhost.bind(source, dest, routing_key, arguments)
    location = f"{req.params['dest']}/{views.properties_key(routing_key, arguments)}"
    return web.Response(status=201, headers={"Location": location})


async def delete_binding(req: Request) -> web.Response:
    vhost, source, dest, found = read.bindings_between(req)
    for b in found:
        if views.same_properties_key(b["properties_key"], req.params["props"]):
            for d, rk, args in list(source.matcher.bindings()):
                if d is dest and views.properties_key(rk, args) == b["properties_key"]:
                    access = rights.check_binding(req, vhost, req.params["kind"], dest.name,
                                                  source.name)
                    rights.check_topic_binding(access, source, rk)
                    vhost.unbind(source, dest, rk, args)
                    return _no_content()
    raise not_found()


# -- connections -------------------------------------------------------------------------------

async def delete_connection(req: Request) -> web.Response:
    conn = read.find_connection(req)
    reason = req.http.headers.get("X-Reason") or CLOSED_VIA_MANAGEMENT
    inventory.close_connection(conn, reason)
    return _no_content()


async def delete_consumer(req: Request) -> web.Response:
    """Cancel one consumer (the console's; RabbitMQ's API has no such route).

    As when its queue is deleted (``Vhost.delete_queue``): the queue forgets the consumer
    and the client gets ``basic.cancel`` if it announced ``consumer_cancel_notify``; the
    deliveries it holds stay unacked on its channel. Its own user or an administrator.
    """
    vhost = read.vhost_of(req)
    for queue in vhost.queues.values():
        for consumer in queue.all_consumers():
            channel = consumer.channel
            if (consumer.tag != req.params["tag"]
                    or views.channel_name(channel) != req.params["channel"]):
                continue
            conn = channel.connection
            if conn.user != req.user and not auth.allowed(req.tags, auth.ADMINISTRATOR):
                raise ApiError(401, "not_authorized", auth.REFUSED_TEXT[auth.ADMINISTRATOR])
            queue.remove_consumer(consumer)
            channel.consumer_cancelled_by_broker(consumer)
            if conn.on_output is not None:
                conn.on_output()
            return _no_content()
    raise not_found()


# -- publish and get ---------------------------------------------------------------------------

PROPERTY_NAMES = ("content_type", "content_encoding", "headers", "delivery_mode", "priority",
                  "correlation_id", "reply_to", "expiration", "message_id", "timestamp",
                  "type", "user_id", "app_id", "cluster_id")


def encode_json_properties(props: dict[str, Any]) -> bytes:
    kwargs: dict[str, Any] = {}
    for key, value in props.items():
        if key not in PROPERTY_NAMES:
            raise bad_request(f"invalid property '{key}'")
        if key in ("delivery_mode", "priority", "timestamp"):
            value = _int(value, key)
        elif key == "headers":
            if not isinstance(value, dict):
                raise bad_request("headers must be an object")
        else:
            value = str(value)
        kwargs[key] = value
    if "timestamp" in kwargs:  # pamqp wants a datetime
        kwargs["timestamp"] = datetime.datetime.fromtimestamp(kwargs["timestamp"],
                                                              tz=datetime.UTC)
    try:
        return encode_properties(commands.Basic.Properties(**kwargs))
    except (ValueError, TypeError) as exc:
        raise bad_request(f"invalid properties: {exc}") from None


async def publish(req: Request) -> web.Response:
    vhost = read.vhost_of(req)
    body = await req.body()
    for key in ("routing_key", "payload", "payload_encoding", "properties"):
        if key not in body:
            raise bad_request(f"[{{key_missing,{key}}}]")
    encoding = body["payload_encoding"]
    payload = body["payload"]
    if encoding == "string":
        data = str(payload).encode()
    elif encoding == "base64":
        try:
            data = base64.b64decode(str(payload), validate=True)
        except binascii.Error:
            raise bad_request("not_base64") from None
    else:
        raise bad_request(f"invalid payload_encoding '{encoding}'")
    raw_props = encode_json_properties(_dict_arg(body, "properties"))
    access = rights.check_publish(req, vhost, req.params["name"])  # before the lookup
    exchange = read.exchange_of(req, vhost, req.params["name"])
    rights.check_topic_publish(access, exchange, str(body["routing_key"]))
    message = Message(exchange.name, str(body["routing_key"]), raw_props, data)
    queues = vhost.route(message)
    tracer = vhost.tracer
    if tracer is not None:  # channel None: published over HTTP
        tracer.published(message, queues, req.user, None, False, False,
                         vhost.explain_route(message) if message.exchange else None)
    stats = vhost.closed_channel_stats  # the vhost's counters of channel-less work
    stats.publish += 1
    if not queues:
        stats.drop_unroutable += 1
        return json_response({"routed": False})
    held = False
    for queue in queues:
        if queue.publish(message) is PublishResult.HELD:
            held = True
    if held and vhost.log.deferred:
        # As RabbitMQ's publish (confirm mode): answer once the store has the message.
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def committed(ok: bool) -> None:
            if not done.done():
                done.set_result(ok)

        vhost.log.after_commit(committed)
        await done
    return json_response({"routed": True})


async def get(req: Request) -> web.Response:
    vhost = read.vhost_of(req)
    body = await req.body()
    for key in ("ackmode", "encoding", "count"):
        if key not in body:
            raise bad_request(f"[{{key_missing,{key}}}]")
    ackmode = str(body["ackmode"])
    if ackmode not in ACK_MODES:
        raise bad_request(f"invalid ackmode '{ackmode}'")  # RabbitMQ 3.10 answers 500 here
    encoding = str(body["encoding"])
    if encoding not in ("auto", "base64"):
        raise bad_request(f"invalid encoding '{encoding}'")
    count = _int(body["count"], "count")
    truncate = _int(body["truncate"], "truncate") if body.get("truncate") not in (None, "") else None
    name = req.params["name"]
    rights.check_get(req, vhost, name)  # before the lookup, as basic.get
    if name not in vhost.queues:
        raise not_found()
    try:
        queue = vhost.queue_for(name, None)
    except ChannelError as exc:  # RabbitMQ's get reports the channel's close text with its code
        raise bad_request(f"{int(exc.code)} {exc.reply_text}") from None
    stats = vhost.closed_channel_stats
    taken = []
    out = []
    for _ in range(max(count, 0)):
        entry = queue.take()
        if entry is None:
            stats.get_empty += 1
            break
        redelivered = entry.delivery_count > 0  # take() counted it unacked and delivered
        if redelivered:
            stats.redeliver += 1
        stats.get += 1
        entry.delivery_count += 1
        if vhost.tracer is not None:  # channel None: got over HTTP
            vhost.tracer.delivered(queue.name, entry.message, "", redelivered, None,
                                   req.user, True)
        taken.append(entry)
        out.append(_message_json(entry.message, redelivered, queue.message_count, encoding,
                                 truncate))
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
            if entry.stored:
                queue.note_delivered(entry)
            queue.requeue(entry)
        elif ackmode.startswith("ack"):
            stats.ack += 1
            queue.settle(entry)
        else:
            queue.reject(entry)
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
        out[name] = views.jsonable(value)
    return out


# -- policies ----------------------------------------------------------------------------------

async def put_policy(req: Request) -> web.Response:
    vhost = read.vhost_of(req)
    body = await req.body()
    for key in ("pattern", "definition"):
        if key not in body:
            raise bad_request(f"[{{key_missing,{key}}}]")
    try:
        policy = validate(vhost.name, req.params["name"], body["pattern"], body["definition"],
                          _int(body.get("priority", 0), "priority"),
                          body.get("apply-to", "all"))
    except PolicyError as exc:
        raise bad_request(f"Validation failed\n\n{exc}\n") from None
    existed = policy.name in vhost.policies.by_name
    vhost.set_policy(policy)
    return _no_content() if existed else _created()


async def delete_policy(req: Request) -> web.Response:
    vhost = read.vhost_of(req)
    if not vhost.clear_policy(req.params["name"]):
        raise not_found()
    return _no_content()
