"""Health checks and the aliveness test, with RabbitMQ's bodies: 200
``{"status":"ok",...}`` or 503 ``{"status":"failed","reason":...}``
(``rabbit_mgmt_wm_health_check_*.erl``, checked against 3.10.8)."""

from __future__ import annotations

import ssl
import time

from aiohttp import web

from leveret.broker.basic_get import basic_get
from leveret.broker.publishing import basic_publish
from leveret.management_ui import read, rights
from leveret.management_ui.router import Request, bad_request, json_response
from leveret.model.message import Message
from leveret.model.object_stats import QueueCounters

# Names RabbitMQ accepts for a protocol (rabbit_mgmt_wm_health_check_protocol_listener).
PROTOCOL_ALIASES = {
    "amqp": "amqp", "amqp091": "amqp", "amqp0-9-1": "amqp", "amqp0.9.1": "amqp",
    "amqps": "amqp/ssl", "amqp/ssl": "amqp/ssl",
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


UNIT_SECONDS = {"days": 86_400, "weeks": 7 * 86_400, "months": 30 * 86_400,
                "years": 365 * 86_400}


async def certificate_expiration(req: Request) -> web.Response:
    """Fails when the AMQPS certificate (``tls_certfile``) expires within the period."""
    try:
        within = int(req.params["within"])
    except ValueError:
        raise bad_request(f"Invalid value {req.params['within']!r}") from None
    unit = req.params["unit"]
    if unit not in UNIT_SECONDS:
        raise bad_request(f"Invalid unit {unit!r}")
    certfile = req.state.config.tls_certfile
    if certfile is None:
        return ok()  # no TLS listener: no certificate can expire
    try:
        # The stdlib's own PEM reader (used by its tests); no dependency for one field.
        not_after = ssl.cert_time_to_seconds(ssl._ssl._test_decode_cert(str(certfile))["notAfter"])  # type: ignore[attr-defined]
    except (OSError, ValueError, KeyError, ssl.SSLError) as exc:
        return failed(f"Cannot read certificate {certfile}: {exc}")
    if not_after > time.time() + within * UNIT_SECONDS[unit]:
        return ok()
    ports = [p for proto, _, p in req.state.broker.listeners if proto == "amqp/ssl"]
    return failed("Certificates expiring", expired=[{
        "node": req.state.node, "protocol": "amqp/ssl", "port": ports[0] if ports else None,
        "certfile": str(certfile),
        "expires": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(not_after))}])


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
    """Declare ``aliveness-test``, publish to it, get the message back (as RabbitMQ < 4.1),
    on a channel of the user: 401 ``Access refused.`` without permissions there."""
    read.vhost_of(req)  # 404 first
    vhost = rights.channel_vhost(req)
    queue, _ = vhost.declare_queue(ALIVENESS_QUEUE, durable=False, exclusive=False,
                                   auto_delete=False, arguments={})
    queue.purge()  # a message left by an earlier, interrupted test
    # The broker's own publish and get, through the default exchange; neither traced nor
    # counted, as the test is the broker's and not the user's.
    basic_publish(vhost, Message("", ALIVENESS_QUEUE, b"\x00\x00", b"test_message"), (),
                  False, None, None)
    got = basic_get(queue, True, QueueCounters(), None, req.user, None)
    if got is None or got.entry.message.body != b"test_message":
        return failed("aliveness test failed")
    return ok()
