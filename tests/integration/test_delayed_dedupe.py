"""Delayed exchanges meeting the rest of the broker: one exchange that both delays and
deduplicates, a delayed publish counted in the exchange's ``message_stats``, and the
plugins' arguments set by policy, all through real clients and the HTTP API.
"""

from __future__ import annotations

import time
from typing import Any

import pika
import pytest

from tests.integration.conftest import WAIT, HttpApi, dedupe_props, wait_for


def _channel(broker: Any) -> tuple[Any, Any]:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    return conn, ch


def _props(key: object = None, delay: object = None) -> pika.BasicProperties:
    return dedupe_props(key, persistent=True, **({} if delay is None else {"x-delay": delay}))


def _drain(ch: Any, queue: str, expected: int) -> list[tuple[bytes, Any]]:
    """Every message that arrives until ``expected`` have, plus one idle second for any
    extra (body, headers)."""
    got: list[tuple[bytes, Any]] = []
    deadline = time.monotonic() + WAIT
    for method, props, body in ch.consume(queue, auto_ack=True, inactivity_timeout=1):
        if method is None:
            if len(got) >= expected or time.monotonic() > deadline:
                break
            continue
        got.append((body, props.headers))
    ch.cancel()
    return got


# -- delaying and deduplicating on one exchange ------------------------------------------------

@pytest.mark.parametrize("type_, arguments", [
    ("topic", {"x-delayed-exchange": True, "x-message-deduplication": True}),
    ("x-delayed-message", {"x-delayed-type": "topic", "x-message-deduplication": True,
                           "x-cache-size": 10}),
])
def test_a_delayed_exchange_deduplicates_before_scheduling(broker, api: HttpApi, qname,
                                                           type_, arguments):
    """Three copies of a key, delayed: three acks, one scheduled, one delivered; a copy
    published after the release is still a duplicate (the window outlives the schedule)."""
    conn, ch = _channel(broker)
    ch.exchange_declare(qname, type_, durable=True, arguments=arguments)
    ch.queue_declare(qname, durable=True)
    ch.queue_bind(qname, qname, "a.#")
    for body in (b"first", b"second", b"third"):  # pika raises on a nack
        ch.basic_publish(qname, "a.b", body, _props("k1", 60_000), mandatory=True)
    ch.basic_publish(qname, "a.b", b"other", _props("k2", 60_000))
    ch.basic_publish(qname, "a.b", b"plain", _props(None, 60_000))  # no key: no duplicate
    record = api.ok(f"/exchanges/%2F/{qname}")
    assert record["messages_delayed"] == 3
    assert record["deduplication"]["duplicates"] == 2
    for scheduled in api.ok(f"/exchanges/%2F/{qname}/delayed")["messages"]:
        assert api.post(f"/exchanges/%2F/{qname}/delayed/{scheduled['id']}/release")[0] == 204
    got = _drain(ch, qname, 3)
    assert sorted(body for body, _ in got) == [b"first", b"other", b"plain"]
    assert all(headers["x-delay"] == -60_000 for _, headers in got)
    ch.basic_publish(qname, "a.b", b"late", _props("k1", 60_000))
    ch.basic_publish(qname, "a.b", b"now", _props("k1"))  # not delayed: the same window
    record = api.ok(f"/exchanges/%2F/{qname}")
    assert (record["messages_delayed"], record["deduplication"]["duplicates"]) == (0, 4)
    assert ch.basic_get(qname, auto_ack=True)[0] is None
    conn.close()


# -- a delayed publish in the exchange's message_stats -------------------------------------------

def test_delayed_publishes_count_in_the_exchanges_publish_in(broker, api: HttpApi, qname):
    """As the plugin's exchange shows them: a delayed publish is a publish into the exchange
    (``publish_in``, with its rate), counted while the channel is open and after it closed."""
    conn, ch = _channel(broker)
    ch.exchange_declare(qname, "x-delayed-message", durable=True,
                        arguments={"x-delayed-type": "direct"})
    ch.queue_declare(qname, durable=True)
    ch.queue_bind(qname, qname, "k")
    for i in range(3):
        ch.basic_publish(qname, "k", b"m%d" % i, _props(delay=60_000))
    ch.basic_publish(qname, "k", b"now", _props())

    def stats() -> Any:
        return api.ok(f"/exchanges/%2F/{qname}").get("message_stats")

    counted = wait_for(lambda: (s := stats()) and s.get("publish_in") == 4 and s, "publish_in")
    assert "rate" in counted["publish_in_details"]
    assert counted["publish_out"] == 1  # only what went on to a queue so far
    conn.close()
    status, _, body = api.post(f"/exchanges/%2F/{qname}/publish", {  # the console's form
        "routing_key": "k", "payload": "over http", "payload_encoding": "string",
        "properties": {"headers": {"x-delay": 60_000}}})
    assert status == 200 and body == {"routed": True}
    wait_for(lambda: (s := stats()) and s["publish_in"] == 5 and s, "publish_in after close")
    listed = {x["name"]: x for x in api.ok("/exchanges/%2F?columns=name,message_stats")}
    assert listed[qname]["message_stats"]["publish_in"] == 5
    assert api.ok(f"/exchanges/%2F/{qname}")["messages_delayed"] == 4


# -- the deduplication plugin's window keys by policy -------------------------------------------

@pytest.mark.parametrize("definition, text", [
    ({"x-cache-size": 0}, "'x-cache-size' must be an integer greater than 0, got 0"),
    ({"x-cache-ttl": "60"}, "'x-cache-ttl' must be an integer greater than 0, got <<\"60\">>"),
    ({"x-cache-persistence": "ram"},
     "'x-cache-persistence' must be either 'disk' or 'memory', got <<\"ram\">>"),
    ({"x-delayed-type": "direct"}, "are not recognised policy settings"),
])
def test_bad_window_policies_are_refused_with_the_plugins_texts(api: HttpApi, qname,
                                                                definition, text):
    status, _, body = api.put(f"/policies/%2F/{qname}", {"pattern": "^never$",
                                                          "definition": definition})
    assert status == 400 and text in body["reason"], body


def test_a_policy_sizes_a_window_its_arguments_leave_unset(broker, api: HttpApi, qname):
    """LavinMQ's argument with no ``x-cache-size`` (128 keys) takes the policy's size, at
    once and at declare; an exchange's own argument wins; clearing the policy restores it."""
    conn, ch = _channel(broker)
    ch.exchange_declare(qname, "fanout", durable=True,
                        arguments={"x-message-deduplication": True})
    ch.exchange_declare(qname + ".own", "fanout", durable=True,
                        arguments={"x-message-deduplication": True, "x-cache-size": 50})
    ch.queue_declare(qname, durable=True)
    ch.queue_bind(qname, qname)

    def size(name: str) -> int:
        return int(api.ok(f"/exchanges/%2F/{name}")["deduplication"]["size"])

    assert (size(qname), size(qname + ".own")) == (128, 50)
    policy = {"pattern": f"^{qname}", "apply-to": "exchanges", "definition": {
        "x-cache-size": 2, "x-cache-ttl": 3_600_000, "x-cache-persistence": "memory"}}
    assert api.put(f"/policies/%2F/{qname}", policy)[0] == 201
    assert (size(qname), size(qname + ".own")) == (2, 50)
    for key in ("k1", "k2", "k3", "k1"):  # k1 was evicted by k3: taken again
        ch.basic_publish(qname, "", key.encode(), _props(key))
    assert ch.queue_declare(qname, passive=True).method.message_count == 4
    ch.exchange_declare(qname + ".later", "fanout", arguments={"x-message-deduplication": True})
    assert size(qname + ".later") == 2
    assert api.delete(f"/policies/%2F/{qname}")[0] == 204
    assert (size(qname), size(qname + ".later")) == (128, 128)
    conn.close()
