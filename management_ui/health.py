"""Health checks and the aliveness test, with RabbitMQ's bodies: 200
``{"status":"ok",...}`` or 503 ``{"status":"failed","reason":...}``
(``rabbit_mgmt_wm_health_check_*.erl``, checked against 3.10.8)."""

from __future__ import annotations

from aiohttp import web

from leveret.management_ui import read
from leveret.management_ui.router import Request, bad_request, json_response
from leveret.model.message import Message

# Names RabbitMQ accepts for a protocol (rabbit_mgmt_wm_health_check_protocol_listener).
PROTOCOL_ALIASES = {
    "amqp": "amqp", "amqp091": "amqp", "amqp0-9-1": "amqp", "amqp0.9.1": "amqp",
    "http": "http", "management": "http", "http/prometheus": "http/prometheus",
    "prometheus": "http/prometheus",
}


def ok(**extra: object) -> web.Response:
    return json_response({"status": "ok", **extra})


def failed(reason: str, **extra: object) -> web.Response:
    return json_response({"status": "failed", "reason": reason, **extra}, status=503)


async def alarms(req: Request) -> web.Response:
    active = sorted(req.state.broker.alarms)
    if not active:
        return ok()
    return failed("There are alarms in effect in the cluster",
                  alarms=[{"node": req.state.node, "resource": r} for r in active])


async def local_alarms(req: Request) -> web.Response:
    active = sorted(req.state.broker.alarms)
    if not active:
        return ok()
    return failed("There are alarms in effect on the node",
                  alarms=[{"node": req.state.node, "resource": r} for r in active])


async def virtual_hosts(req: Request) -> web.Response:
    return ok()  # every vhost of a Leveret node runs on the node's one loop


async def single_node(req: Request) -> web.Response:
    return ok(reason="single node cluster")


async def certificate_expiration(req: Request) -> web.Response:
    try:
        int(req.params["within"])
    except ValueError:
        raise bad_request(f"Invalid value {req.params['within']!r}") from None
    if req.params["unit"] not in ("days", "weeks", "months", "years"):
        raise bad_request(f"Invalid unit {req.params['unit']!r}")
    return ok()  # no TLS listeners yet (issue 11): no certificate can expire


async def port_listener(req: Request) -> web.Response:
    try:
        port = int(req.params["port"])
    except ValueError:
        raise bad_request(f"Invalid port {req.params['port']!r}") from None
    ports = sorted({p for _, _, p in req.state.broker.listeners})
    if port in ports:
        return ok(port=port)
    return failed("No active listener", missing=port, ports=ports)


async def protocol_listener(req: Request) -> web.Response:
    asked = req.params["protocol"]
    protocols = list(dict.fromkeys(p for p, _, _ in req.state.broker.listeners))
    if PROTOCOL_ALIASES.get(asked.lower()) in protocols:
        return ok(protocol=asked)
    return failed("No active listener", missing=asked, protocols=protocols)


ALIVENESS_QUEUE = "aliveness-test"


async def aliveness_test(req: Request) -> web.Response:
    """Declare ``aliveness-test``, publish to it, get the message back (as RabbitMQ < 4.1)."""
    vhost = read.vhost_of(req)
    queue, _ = vhost.declare_queue(ALIVENESS_QUEUE, durable=False, exclusive=False,
                                   auto_delete=False, arguments={})
    queue.purge()  # a message left by an earlier, interrupted test
    queue.publish(Message("", ALIVENESS_QUEUE, b"\x00\x00", b"test_message"))
    entry = queue.take()
    if entry is None or entry.message.body != b"test_message":
        return failed("aliveness test failed")
    queue.unacked += 1
    queue.settle(entry)
    return ok()
