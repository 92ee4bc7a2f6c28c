"""Write routes: declare/delete exchanges and queues, bindings, purge, close a
connection, policies (publish and get over HTTP: ``basic.py``).

Every change goes through the broker model's operations API
(``broker/vhost.py``), so the rules and texts are AMQP's: an inequivalent
redeclare is a 400 with the text a channel.close would carry, and the user's
configure / write / read permissions apply as on AMQP (``rights.py``). Input is
lenient as RabbitMQ's is: ``"durable": "true"``, and the
``vhost``/``name`` keys rabbitmqadmin repeats in the body are accepted.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from leveret.broker import inventory
from leveret.broker.api import EXCHANGE_TYPES, PolicyError, validate_policy
from leveret.broker.delayed import check_declaration
from leveret.broker.inventory import truthy
from leveret.management_ui import read, rights, sessions, views
from leveret.management_ui.router import ApiError, Request, bad_request, not_found
from leveret.model.errors import ChannelError, ConnectionError_

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
    if not existed:
        try:
            check_declaration(type_, arguments)
        except ConnectionError_ as exc:  # over AMQP a connection error; here a bad request
            raise bad_request(exc.detail) from None
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
    """queue.bind / exchange.bind. As RabbitMQ 3.10: no such vhost is 404 ``not_found``
    ``vhost_not_found``; then the permission checks, refused whether or not the ends
    exist; then 404 ``not_found`` naming the missing end, the source first, without the
    ``NOT_FOUND -`` of the channel's close reason; then 400 for another connection's
    exclusive queue (unbinding too)."""
    params = req.params
    vhost = req.state.broker.vhosts.get(params["vhost"])
    if vhost is None:
        raise ApiError(404, "not_found", "vhost_not_found")
    access = rights.check_binding(req, vhost, params["kind"], params["dest"], params["source"])
    try:
        source, dest = read.binding_ends(vhost, params)
    except ChannelError as exc:
        raise ApiError(404, "not_found", exc.detail) from None
    if params["kind"] == "q":
        vhost.check_exclusive(dest, None)  # another connection's exclusive queue: 400
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
                    if req.params["kind"] == "q":
                        vhost.check_exclusive(dest, None)
                    vhost.unbind(source, dest, rk, args)
                    return _no_content()
    raise not_found()


# -- connections -------------------------------------------------------------------------------

async def delete_connection(req: Request) -> web.Response:
    conn = sessions.find_connection(req, close=True)  # its own user or an administrator
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
            sessions.check_owner(req, conn.user, close=True)
            queue.remove_consumer(consumer)
            channel.consumer_cancelled_by_broker(consumer)
            if conn.on_output is not None:
                conn.on_output()
            return _no_content()
    raise not_found()


# -- policies ----------------------------------------------------------------------------------

async def put_policy(req: Request) -> web.Response:
    vhost = req.state.broker.vhosts.get(req.params["vhost"])
    if vhost is None:  # as RabbitMQ 3.10.8 (and post_binding)
        raise ApiError(404, "not_found", "vhost_not_found")
    body = await req.body()
    for key in ("pattern", "definition"):
        if key not in body:
            raise bad_request(f"[{{key_missing,{key}}}]")
    try:
        policy = validate_policy(vhost.name, req.params["name"], body["pattern"], body["definition"],
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
