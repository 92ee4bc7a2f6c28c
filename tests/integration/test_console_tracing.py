"""The console's tracing over real HTTP, driven by pika: a message's life from publish to ack
(and reject, dead-letter, expire, return), the capped ring, the queue filter, the SSE feed,
and who may trace."""

from __future__ import annotations

import base64
import itertools
import json
import threading
import time
import urllib.request
from typing import Any

import pika

from tests.integration.conftest import WAIT

T = "/traces/%2F"


def _channel(broker: Any) -> tuple[pika.BlockingConnection, Any]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    return conn, conn.channel()


def _events(api: Any, message_id: str) -> list[dict[str, Any]]:
    status, _, out = api.get(f"{T}?message_id={message_id}")
    assert status == 200, out
    return out


def _wait_events(api: Any, message_id: str, last: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + WAIT
    while True:
        events = _events(api, message_id)
        if (events and events[-1]["event"] == last) or time.monotonic() > deadline:
            return events


def test_a_message_from_publish_to_ack(api, broker, qname):
    assert api.put(T, {"capacity": 1000})[0] in (201, 204)
    try:
        conn, ch = _channel(broker)
        ch.queue_declare(qname)
        ch.basic_publish("", qname, b"hello", pika.BasicProperties(message_id=qname + "-1"))
        method, _, _ = next(ch.consume(qname, inactivity_timeout=60))
        ch.basic_ack(method.delivery_tag)
        ch.cancel()
        events = _wait_events(api, qname + "-1", "ack")
        assert [e["event"] for e in events] == ["publish", "route", "enqueue", "deliver", "ack"]
        publish, route, enqueue, deliver, ack = events
        assert publish["user"] == "guest" and publish["exchange"] == ""
        assert publish["routing_key"] == qname and publish["channel"] == 1
        assert publish["mandatory"] is False and publish["confirm"] is False
        assert route["queues"] == [qname] and route["routed"] is True
        assert enqueue["queue"] == qname
        assert deliver["consumer_tag"].startswith("ctag") and deliver["redelivered"] is False
        assert deliver["ack_required"] is True and ack["queue"] == qname
        assert all(a["timestamp"] <= b["timestamp"] for a, b in itertools.pairwise(events))
        conn.close()
    finally:
        api.delete(T)


def test_reject_dead_letter_expire_and_return(api, broker, qname):
    assert api.put(T, {})[0] in (201, 204)
    try:
        conn, ch = _channel(broker)
        ch.queue_declare(qname + "-dlq")
        ch.queue_declare(qname, arguments={"x-dead-letter-exchange": "",
                                           "x-dead-letter-routing-key": qname + "-dlq"})
        ch.basic_publish("", qname, b"x", pika.BasicProperties(message_id=qname + "-r"))
        method, _, _ = ch.basic_get(qname)
        ch.basic_reject(method.delivery_tag, requeue=False)
        events = _wait_events(api, qname + "-r", "enqueue")
        assert [e["event"] for e in events] == ["publish", "route", "enqueue", "deliver",
                                                "reject", "dead-letter", "route", "enqueue"]
        assert events[3]["consumer_tag"] == "" and events[4]["requeue"] is False
        assert events[5]["reason"] == "rejected" and events[5]["dead_letter_exchange"] == ""
        # The trace follows the dead-lettered copy through the DLX into the next queue.
        route, enqueue = events[6:]
        assert route["dead_lettered_from"] == qname and route["queues"] == [qname + "-dlq"]
        assert route["reason"] == "rejected" and route["routing_key"] == qname + "-dlq"
        assert enqueue["queue"] == qname + "-dlq" and enqueue["dead_lettered_from"] == qname

        ch.queue_declare(qname + "-ttl", arguments={"x-message-ttl": 50})
        ch.basic_publish("", qname + "-ttl", b"x", pika.BasicProperties(message_id=qname + "-e"))
        events = _wait_events(api, qname + "-e", "expire")
        assert [e["event"] for e in events][-1] == "expire"
        assert events[-1]["queue"] == qname + "-ttl"

        ch.basic_publish("", qname + "-nowhere", b"x",
                         pika.BasicProperties(message_id=qname + "-u"), mandatory=True)
        conn.process_data_events(time_limit=0.2)
        events = _events(api, qname + "-u")
        assert [e["event"] for e in events] == ["publish", "route", "return"]
        assert events[1]["routed"] is False and events[2]["reply_text"] == "NO_ROUTE"
        conn.close()
    finally:
        api.delete(T)


def test_route_shows_exchange_chain_bindings_and_alternate_exchange(api, broker, qname):
    """A topic exchange bound to a direct one whose alternate exchange catches the message:
    the route event names each exchange, how it was reached, and the bindings that matched."""
    assert api.put(T, {})[0] in (201, 204)
    x, inner, ae = qname + "-x", qname + "-inner", qname + "-ae"
    conn, ch = _channel(broker)
    try:
        ch.exchange_declare(ae, "fanout")
        ch.exchange_declare(inner, "direct", arguments={"alternate-exchange": ae})
        ch.exchange_declare(x, "topic")
        ch.exchange_bind(inner, x, "orders.#")
        ch.queue_declare(qname)
        ch.queue_bind(qname, ae)
        ch.basic_publish(x, "orders.eu", b"x", pika.BasicProperties(message_id=qname + "-c"))
        ch.basic_publish(x, "nowhere", b"x", pika.BasicProperties(message_id=qname + "-u"))
        route = next(e for e in _wait_events(api, qname + "-c", "enqueue")
                     if e["event"] == "route")
        assert route["exchanges"] == [{"name": x, "via": "published"},
                                      {"name": inner, "via": "exchange-binding"},
                                      {"name": ae, "via": "alternate-exchange"}]
        assert route["bindings"] == [
            {"source": x, "destination": inner, "destination_type": "exchange"},
            {"source": ae, "destination": qname, "destination_type": "queue"}]
        assert route["alternate_exchange"] == ae and route["queues"] == [qname]
        lost = _wait_events(api, qname + "-u", "route")
        assert [e["event"] for e in lost] == ["publish", "route"]
        assert lost[1]["unroutable"] is True and lost[1]["routed"] is False
    finally:
        for name in (x, inner, ae):
            ch.exchange_delete(name)
        conn.close()
        api.delete(T)


def test_http_publish_get_and_requeue_on_close_are_traced(api, broker, qname):
    assert api.put(T, {})[0] in (201, 204)
    try:
        conn, ch = _channel(broker)
        ch.queue_declare(qname)
        status, _, out = api.post("/exchanges/%2F/amq.default/publish", {
            "routing_key": qname, "payload": "hi", "payload_encoding": "string",
            "properties": {"message_id": qname + "-h"}})
        assert status == 200 and out == {"routed": True}
        status, _, got = api.post(f"/queues/%2F/{qname}/get", {
            "count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"})
        assert status == 200 and len(got) == 1
        method, _, _ = next(ch.consume(qname, inactivity_timeout=60))
        assert method is not None
        conn.close()  # the unacked delivery goes back to the queue
        events = _wait_events(api, qname + "-h", "nack")
        assert [e["event"] for e in events] == ["publish", "route", "enqueue", "deliver",
                                                "nack", "deliver", "nack"]
        publish, _, _, http_get, http_requeue, deliver, closed = events
        assert publish["via"] == "http" and publish["user"] == "guest"
        assert http_get["channel"] is None and http_get["user"] == "guest"
        assert http_requeue["requeue"] is True and http_requeue["reason"].startswith("get ")
        assert deliver["redelivered"] is True
        assert closed["reason"] == "channel closed" and closed["requeue"] is True
        assert closed["consumer_tag"] == deliver["consumer_tag"]
    finally:
        api.delete(T)


def test_ring_is_capped_and_filtered_by_queue(api, broker, qname):
    assert api.put(T, {"capacity": 6, "queue": "^" + qname + "-a$"})[0] in (201, 204)
    try:
        conn, ch = _channel(broker)
        ch.queue_declare(qname + "-a")
        ch.queue_declare(qname + "-b")
        for i in range(8):
            ch.basic_publish("", qname + "-b", b"x", pika.BasicProperties(message_id=f"b{i}"))
            ch.basic_publish("", qname + "-a", b"x", pika.BasicProperties(message_id=f"a{i}"))
        conn.process_data_events(time_limit=0.2)
        status = api.ok(T)
        assert status["enabled"] is True and status["capacity"] == 6
        assert status["queue"] == "^" + qname + "-a$"
        # One record per publish (read as its publish, route and enqueue events).
        assert status["records"] == 6 and status["evicted"] == 2
        assert [(e["message_id"], e["event"]) for e in status["recent"]] == [
            (f"a{i}", kind) for i in range(2, 8) for kind in ("publish", "route", "enqueue")]
        assert _events(api, "b1") == []
        conn.close()
    finally:
        api.delete(T)
    assert api.ok(T) == {"enabled": False}


def test_bad_trace_requests(api):
    for body in ({"capacity": 0}, {"capacity": "x"}, {"capacity": 10**9}, {"queue": "("}):
        status, _, out = api.put(T, body)
        assert status == 400 and out["error"] == "bad_request", body
    status, _, out = api.get(T + "/stream")
    assert status == 400 and "tracing is off" in out["reason"]
    assert api.put("/traces/no-such-vhost", {})[0] == 404


def test_sse_stream_feeds_events_live(api, broker, qname):
    assert api.put(T, {})[0] in (201, 204)
    lines: list[str] = []
    token = base64.b64encode(b"guest:guest").decode()
    req = urllib.request.Request(api.base + T + "/stream",
                                 headers={"Authorization": "Basic " + token})
    resp = urllib.request.urlopen(req, timeout=60)
    assert resp.headers["Content-Type"].startswith("text/event-stream")

    def read() -> None:
        for raw in resp:
            lines.append(raw.decode().rstrip("\n"))
            if lines[-1] == "event: end":
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        conn, ch = _channel(broker)
        ch.queue_declare(qname)
        ch.basic_publish("", qname, b"x", pika.BasicProperties(message_id=qname + "-s"))
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and sum(1 for x in lines if "enqueue" in x) < 1:
            time.sleep(0.05)
        conn.close()
    finally:
        api.delete(T)
    reader.join(60)
    data = [json.loads(x[len("data: "):]) for x in lines if x.startswith("data: {\"")]
    assert [d["event"] for d in data][:3] == ["publish", "route", "enqueue"]
    assert data[0]["message_id"] == qname + "-s"
    assert "event: trace" in lines and lines[-1] == "event: end"  # ended when tracing stopped


def test_tracing_needs_monitoring(api, qname):
    user = "tr-" + qname[-8:]
    api.put(f"/users/{user}", {"password": "pw", "tags": "management"})
    api.put(f"/permissions/%2F/{user}", {"configure": ".*", "write": ".*", "read": ".*"})
    other = type(api)(api.base, user, "pw")
    status, _, out = other.put(T, {})
    assert (status, out["reason"]) == (401, "Not monitor user")
    assert api.ok(T) == {"enabled": False}
    api.delete(f"/users/{user}")
