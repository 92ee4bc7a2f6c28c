"""The console's live broker log over SSE (administrators only) and the alert hints on the
queue list, against a real broker driven by pika and real HTTP."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.request
from typing import Any

import pika

from tests.integration.conftest import WAIT

Q = "/queues/%2F/"


def _follow(api: Any, path: str, lines: list[str], stop: str) -> threading.Thread:
    token = base64.b64encode(f"{api.user}:{api.password}".encode()).decode()
    req = urllib.request.Request(api.base + path, headers={"Authorization": "Basic " + token})
    resp = urllib.request.urlopen(req, timeout=60)
    assert resp.headers["Content-Type"].startswith("text/event-stream")

    def read() -> None:
        for raw in resp:
            lines.append(raw.decode().rstrip("\n"))
            if stop in lines[-1]:
                resp.close()
                return

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _wait(lines: list[str], text: str, timeout: float = WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(text in x for x in lines):
            return True
        time.sleep(0.05)
    return False


def test_log_stream_shows_broker_records_live(api, broker, qname):
    user = "log-" + qname[-8:]
    lines: list[str] = []
    reader = _follow(api, "/logs/stream?level=info", lines, "deleted user")
    assert _wait(lines, ": stream open")
    assert api.put(f"/users/{user}", {"password": "pw", "tags": ""})[0] in (201, 204)
    assert api.delete(f"/users/{user}")[0] == 204
    reader.join(60)
    records = [json.loads(x[len("data: "):]) for x in lines if x.startswith("data: ")]
    created = [r for r in records if r["message"] == f"created user '{user}'"]
    assert created and created[0]["level"] == "info"
    assert created[0]["logger"] == "leveret.broker.accounts" and created[0]["timestamp"] > 0
    assert "event: log" in lines


def test_log_stream_level_filter_and_admin_only(api, broker, qname):
    lines: list[str] = []
    reader = _follow(api, "/logs/stream?level=warning", lines, "login refused")
    assert _wait(lines, ": stream open")
    user = "lg-" + qname[-8:]
    api.put(f"/users/{user}", {"password": "pw", "tags": "management"})
    try:
        pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", broker.port, credentials=pika.PlainCredentials(user, "wrong")))
    except pika.exceptions.AMQPError:
        pass
    reader.join(60)
    records = [json.loads(x[len("data: "):]) for x in lines if x.startswith("data: ")]
    assert records and all(r["level"] in ("warning", "error") for r in records)
    assert any(f"login refused for user '{user}'" in r["message"] for r in records)
    assert not any(r["message"].startswith("created user") for r in records)
    other = type(api)(api.base, user, "pw")
    status, _, out = other.get("/logs/stream")
    assert (status, out["reason"]) == (401, "Not administrator user")
    assert api.get("/logs/stream?level=loud")[0] == 400
    api.delete(f"/users/{user}")


def test_log_stream_starts_with_the_last_lines_when_asked(api, broker, qname):
    """?tail=N: a new listener sees the last N records of its level at once, though no one
    was listening when they were written; without it, the stream starts now."""
    users = [f"tail{i}-{qname[-8:]}" for i in range(3)]
    for user in users:
        assert api.put(f"/users/{user}", {"password": "pw", "tags": ""})[0] in (201, 204)
    lines: list[str] = []
    reader = _follow(api, "/logs/stream?level=info&tail=2", lines, f"created user '{users[2]}'")
    reader.join(60)
    records = [json.loads(x[len("data: "):]) for x in lines if x.startswith("data: ")]
    # The last two info records, written before the stream opened (the broker's other
    # records in between, if any, would take the place of the second user's).
    assert len(records) == 2 and all(r["level"] == "info" for r in records)
    assert records[-1]["message"] == f"created user '{users[2]}'"
    assert api.get("/logs/stream?tail=5000")[0] == 400
    for user in users:
        api.delete(f"/users/{user}")


def _alerts(api: Any, name: str, **query: Any) -> list[str]:
    suffix = "&".join(f"{k}={v}" for k, v in query.items())
    status, _, items = api.get("/queues/%2F?name=" + name + ("&" + suffix if suffix else ""))
    assert status == 200
    (item,) = [i for i in items if i["name"] == name]
    return [a["alert"] for a in item["alerts"]]


def test_no_acks_and_consumer_utilisation(api, broker, qname):
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    ch = conn.channel()
    ch.queue_declare(qname)
    for i in range(5):
        ch.basic_publish("", qname, b"m%d" % i)
    ch.basic_qos(prefetch_count=2)
    held: list[Any] = []
    consuming = time.monotonic()  # before the consumer could block: bounds how long it has
    ch.basic_consume(qname, lambda c, m, p, b: held.append(m))
    deadline = time.monotonic() + WAIT
    while len(held) < 2 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)
    # Utilisation is a time average (half-life 1 s, as RabbitMQ's): just blocked, it is
    # still high (when the test got here fast enough to say so); 1.5 s of a full prefetch
    # with messages waiting bring it under 0.5, however late the test looks.
    utilisation = api.ok(Q + qname)["consumer_utilisation"]
    if time.monotonic() - consuming < 0.9:
        assert utilisation > 0.5
    time.sleep(1.5)
    assert _alerts(api, qname) == ["low_consumer_utilisation"]  # 3 ready, prefetch full
    item = api.ok(Q + qname)
    assert 0.0 < item["consumer_utilisation"] < 0.5 and item["alerts"][0]["reason"].startswith(
        "3 ready")
    assert item["consumer_capacity"] < 0.5
    assert "no_acks" in _alerts(api, qname, no_ack_seconds=1)
    assert "no_acks" not in _alerts(api, qname)  # default threshold: 60 s
    ch.basic_ack(held[-1].delivery_tag, multiple=True)
    conn.process_data_events(time_limit=0.3)
    assert "no_acks" not in _alerts(api, qname, no_ack_seconds=1)  # acks moved
    assert api.get("/queues/%2F?no_ack_seconds=soon")[0] == 400
    conn.close()


def test_a_consumer_that_keeps_up_has_full_utilisation(api, broker, qname):
    """Unlimited prefetch, a backlog drained as fast as it comes: never blocked, 1.0."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    ch = conn.channel()
    ch.queue_declare(qname)
    got: list[bytes] = []
    ch.basic_consume(qname, lambda c, m, p, b: got.append(b), auto_ack=True)
    for i in range(500):
        ch.basic_publish("", qname, b"m%d" % i)
    deadline = time.monotonic() + WAIT
    while len(got) < 500 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)
    assert len(got) == 500
    item = api.ok(Q + qname)
    assert item["consumer_utilisation"] == 1.0 and _alerts(api, qname) == []
    conn.close()


def test_growing_dead_letter_queue(api, broker, qname):
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    ch = conn.channel()
    ch.queue_declare(qname + "-dlq")
    ch.queue_declare(qname, arguments={"x-dead-letter-exchange": "",
                                       "x-dead-letter-routing-key": qname + "-dlq",
                                       "x-message-ttl": 1})
    assert _alerts(api, qname + "-dlq") == []
    # The sampler (every 5 s) sees the ready count grow between two samples.
    deadline = time.monotonic() + WAIT
    found: list[str] = []
    while time.monotonic() < deadline and "dead_letter_queue_growing" not in found:
        ch.basic_publish("", qname, b"x")
        conn.process_data_events(time_limit=0.2)
        found = _alerts(api, qname + "-dlq")
    assert "dead_letter_queue_growing" in found
    assert _alerts(api, qname) == []  # the origin is not a dead-letter target
    conn.close()
