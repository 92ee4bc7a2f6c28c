"""Routes the other management tests reach only indirectly (through the console, a loop or
a path built in pieces: docs/api-routes.md), each called here by its literal path, with
what a user sees checked: user limits (RabbitMQ 3.10.8's answers, compared live when it
runs), the health checks, the always-empty lists, consumer cancel, tracing and redrive."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import urllib.request
from typing import Any

import pika
import pytest

from tests.integration.conftest import WAIT, HttpApi

USER_LIMIT_CASES = [
    # (method, path under /user-limits/, body) -> answered the same by both brokers
    ("PUT", "{user}/max-connections", {"value": 5}),
    ("PUT", "nobody-here/max-connections", {"value": 5}),
    ("PUT", "{user}/max-foo", {"value": 5}),
    ("PUT", "{user}/max-connections", {"value": "x"}),
    ("PUT", "{user}/max-channels", {}),
    ("PUT", "{user}/max-channels", {"value": 7}),
    ("PUT", "{user}/max-channels", {"value": -1}),  # negative: no limit, still listed
    ("DELETE", "{user}/max-channels", None),  # not set: still 204
    ("DELETE", "{user}/max-connections", None),
]


def _user_limit_answers(api: HttpApi, user: str) -> list[Any]:
    status, _, _ = api.put(f"/users/{user}", {"password": "pw", "tags": ""})
    assert status in (201, 204)
    out: list[Any] = []
    try:
        for method, path, body in USER_LIMIT_CASES:
            status, _, answer = api.request(method, "/user-limits/" + path.format(user=user),
                                            body)
            out.append((method, path, body, status, answer))
            out.append(("GET", api.ok(f"/user-limits/{user}")))
    finally:
        api.delete(f"/users/{user}")
    return out


@pytest.mark.parametrize("target", ["leveret", "rabbitmq"])
def test_user_limits_are_set_listed_and_cleared_as_rabbitmq(api, request, target):
    if target == "rabbitmq":
        api = request.getfixturevalue("rabbitmq_http")
    answers = _user_limit_answers(api, "limits-probe")
    expected = [
        ("PUT", "{user}/max-connections", {"value": 5}, 204, None),
        ("GET", [{"user": "limits-probe", "value": {"max-connections": 5}}]),
        ("PUT", "nobody-here/max-connections", {"value": 5}, 400,
         {"error": "bad_request", "reason": ["no_such_user", "nobody-here"]}),
        ("GET", [{"user": "limits-probe", "value": {"max-connections": 5}}]),
        ("PUT", "{user}/max-foo", {"value": 5}, 400,
         {"error": "bad_request",
          "reason": 'Unrecognised terms [{<<"max-foo">>,5}] in user-limits'}),
        ("GET", [{"user": "limits-probe", "value": {"max-connections": 5}}]),
        ("PUT", "{user}/max-connections", {"value": "x"}, 400,
         {"error": "bad_request",
          "reason": 'max-connections should be a number, actually was <<"x">>'}),
        ("GET", [{"user": "limits-probe", "value": {"max-connections": 5}}]),
        ("PUT", "{user}/max-channels", {}, 400,
         {"error": "bad_request", "reason": "[{key_missing,value}]"}),
        ("GET", [{"user": "limits-probe", "value": {"max-connections": 5}}]),
        ("PUT", "{user}/max-channels", {"value": 7}, 204, None),
        ("GET", [{"user": "limits-probe", "value": {"max-connections": 5, "max-channels": 7}}]),
        ("PUT", "{user}/max-channels", {"value": -1}, 204, None),
        ("GET", [{"user": "limits-probe", "value": {"max-connections": 5, "max-channels": -1}}]),
        ("DELETE", "{user}/max-channels", None, 204, None),
        ("GET", [{"user": "limits-probe", "value": {"max-connections": 5}}]),
        ("DELETE", "{user}/max-connections", None, 204, None),
        ("GET", []),
    ]
    assert answers == expected


def test_a_user_limit_set_over_http_is_enforced(api, broker):
    """The limit is the broker's, not a stored number: a second connection is refused."""
    status, _, _ = api.put("/users/limited", {"password": "pw", "tags": ""})
    assert status in (201, 204)
    api.put("/permissions/%2F/limited", {"configure": ".*", "write": ".*", "read": ".*"})
    try:
        assert api.put("/user-limits/limited/max-connections", {"value": 1})[0] == 204
        params = pika.ConnectionParameters("127.0.0.1", broker.port,
                                           credentials=pika.PlainCredentials("limited", "pw"))
        first = pika.BlockingConnection(params)
        try:
            with pytest.raises(pika.exceptions.AMQPConnectionError):
                pika.BlockingConnection(params)
        finally:
            first.close()
        assert api.delete("/user-limits/limited/max-connections")[0] == 204
        pika.BlockingConnection(params).close()
    finally:
        api.delete("/users/limited")
    assert api.get("/user-limits/limited")[0] == 404


def test_health_checks_pass_on_a_healthy_node(api):
    answers = [
        api.get("/health/checks/alarms"),
        api.get("/health/checks/local-alarms"),
        api.get("/health/checks/virtual-hosts"),
        api.get("/health/checks/node-is-quorum-critical"),
        api.get("/health/checks/node-is-mirror-sync-critical"),
    ]
    assert [(status, body["status"]) for status, _, body in answers] == [(200, "ok")] * 5


def test_lists_leveret_keeps_empty(api):
    assert api.get("/operator-policies")[::2] == (200, [])
    assert api.get("/global-parameters")[::2] == (200, [])
    assert api.get("/operator-policies", auth=False)[0] == 401


def test_cancelling_a_consumer_over_http_tells_the_client(api, broker, qname):
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    try:
        ch = conn.channel()
        ch.queue_declare(qname)
        cancelled: list[str] = []
        ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
        tag = ch.basic_consume(qname, lambda *a: None)
        deadline = time.monotonic() + WAIT
        while not api.ok("/consumers/%2F") and time.monotonic() < deadline:
            time.sleep(0.05)
        [consumer] = [c for c in api.ok("/consumers/%2F") if c["consumer_tag"] == tag]
        channel = urllib.parse.quote(consumer["channel_details"]["name"], safe="")
        assert api.delete(f"/consumers/%2F/{channel}/nope")[0] == 404
        assert api.delete(f"/consumers/%2F/{channel}/{tag}")[0] == 204
        deadline = time.monotonic() + WAIT
        while not cancelled and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
        assert cancelled == [tag]
        assert api.ok(f"/queues/%2F/{qname}")["consumers"] == 0
        ch.queue_delete(qname)
    finally:
        conn.close()


def test_trace_routes_start_read_stream_and_stop(api, broker, qname):
    assert api.get("/traces/%2F/stream")[0] == 400  # tracing is off
    assert api.put("/traces/%2F", {"capacity": 100})[0] in (201, 204)
    api.put(f"/queues/%2F/{qname}", {"durable": False})
    lines: list[str] = []
    subscribed = threading.Event()

    def listen() -> None:
        token = "Z3Vlc3Q6Z3Vlc3Q="  # guest:guest
        req = urllib.request.Request(api.base + "/traces/%2F/stream",
                                     headers={"Authorization": f"Basic {token}"})
        with urllib.request.urlopen(req, timeout=WAIT) as resp:
            subscribed.set()  # the stream subscribes before it sends its headers
            for raw in resp:
                line = raw.decode().strip()
                if line.startswith("data:"):
                    lines.append(line)
                    return

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert subscribed.wait(WAIT)
    body = {"routing_key": qname, "payload": "traced", "payload_encoding": "string",
            "properties": {"message_id": "trace-me"}}
    assert api.post("/exchanges/%2F/amq.default/publish", body)[2] == {"routed": True}
    listener.join(WAIT)
    assert lines and json.loads(lines[0][5:])["event"] == "publish"
    events = [e["event"] for e in api.ok("/traces/%2F?message_id=trace-me")]
    assert events[:3] == ["publish", "route", "enqueue"]
    assert api.delete("/traces/%2F")[0] == 204
    assert api.get("/traces/%2F/stream")[0] == 400
    api.delete(f"/queues/%2F/{qname}")


def test_redrive_route_sends_a_dead_letter_home(api, qname):
    dlq = qname + "-dlq"
    api.put(f"/queues/%2F/{dlq}", {"durable": False})
    api.put(f"/queues/%2F/{qname}", {"durable": False, "arguments": {
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}})
    api.post("/exchanges/%2F/amq.default/publish", {
        "routing_key": qname, "payload": "m", "payload_encoding": "string", "properties": {}})
    got = api.post(f"/queues/%2F/{qname}/get",
                   {"count": 1, "ackmode": "reject_requeue_false", "encoding": "auto"})[2]
    assert [m["payload"] for m in got] == ["m"]
    deadline = time.monotonic() + WAIT
    while api.ok(f"/queues/%2F/{dlq}")["messages"] != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    status, _, out = api.post(f"/queues/%2F/{dlq}/redrive", {"count": 10})
    assert (status, out) == (200, {"moved": 1, "skipped": []})
    back = api.post(f"/queues/%2F/{qname}/get",
                    {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"})[2]
    assert [m["payload"] for m in back] == ["m"]
    api.delete(f"/queues/%2F/{qname}")
    api.delete(f"/queues/%2F/{dlq}")
