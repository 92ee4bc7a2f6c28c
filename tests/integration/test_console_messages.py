"""The console's queue API over real HTTP against a real broker, checked with pika:
peek and search change nothing (order, redelivered), a deep paged queue is peeked in the
middle, dead letters are redriven to their origin, messages moved and deleted, and the
permissions each needs (read on the queue; write on the exchange published to)."""

from __future__ import annotations

import time
from typing import Any

import pika
import pytest

from tests.integration.conftest import WAIT

Q = "/queues/%2F/"
# A lazy queue pages past PAGE_HIGH whatever the memory (queues/paging.py).
LAZY = {"x-queue-mode": "lazy"}


def _channel(broker: Any) -> tuple[pika.BlockingConnection, Any]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    return conn, conn.channel()


def _publish(ch: Any, queue: str, n: int, persistent: bool = False, **props: Any) -> None:
    for i in range(n):
        ch.basic_publish("", queue, f"m{i}".encode(), pika.BasicProperties(
            message_id=f"id-{i}", correlation_id=f"c-{i % 3}", headers={"n": i, "kind": "k"},
            delivery_mode=2 if persistent else 1, **props))


def _consume_all(conn: pika.BlockingConnection, ch: Any, queue: str, n: int,
                 ) -> list[tuple[bytes, bool]]:
    got: list[tuple[bytes, bool]] = []
    for method, _props, body in ch.consume(queue, auto_ack=True, inactivity_timeout=60):
        if method is None:
            break
        got.append((body, method.redelivered))
        if len(got) == n:
            break
    ch.cancel()
    return got


def _ok(api: Any, method: str, path: str, body: Any) -> Any:
    status, _, out = api.request(method, path, body)
    assert status == 200, (path, status, out)
    return out


def test_peek_changes_nothing(api, broker, qname):
    conn, ch = _channel(broker)
    ch.queue_declare(qname)
    _publish(ch, qname, 5)
    page = _ok(api, "POST", Q + qname + "/peek", {"offset": 1, "count": 3})
    assert [m["position"] for m in page] == [1, 2, 3]
    assert [m["payload"] for m in page] == ["m1", "m2", "m3"]
    first = page[0]
    assert first["payload_encoding"] == "string" and first["payload_bytes"] == 2
    assert first["redelivered"] is False and first["exchange"] == ""
    assert first["routing_key"] == qname
    assert first["properties"]["message_id"] == "id-1"
    assert first["properties"]["headers"] == {"n": 1, "kind": "k"}
    _ok(api, "POST", Q + qname + "/peek", {"count": 5})  # twice: still nothing changes
    assert ch.queue_declare(qname, passive=True).method.message_count == 5
    got = _consume_all(conn, ch, qname, 5)
    assert got == [(f"m{i}".encode(), False) for i in range(5)]
    conn.close()


def test_peek_base64_and_requeued_order(api, broker, qname):
    conn, ch = _channel(broker)
    ch.queue_declare(qname)
    ch.basic_publish("", qname, b"\xff\x00")
    _publish(ch, qname, 2)
    method, _, _ = ch.basic_get(qname)  # the binary one, then requeued: redelivered, head
    ch.basic_nack(method.delivery_tag, requeue=True)
    page = _ok(api, "POST", Q + qname + "/peek", {"count": 10, "encoding": "auto"})
    assert [(m["payload"], m["payload_encoding"], m["redelivered"]) for m in page] == [
        ("/wA=", "base64", True), ("m0", "string", False), ("m1", "string", False)]
    page = _ok(api, "POST", Q + qname + "/peek", {"count": 2, "encoding": "base64"})
    assert page[1]["payload"] == "bTA=" and page[1]["payload_encoding"] == "base64"
    conn.close()


def test_peek_unacked_shows_consumer_channel_and_age(api, broker, qname):
    conn, ch = _channel(broker)
    ch.queue_declare(qname)
    _publish(ch, qname, 3)
    ch.basic_qos(prefetch_count=2)
    held: list[Any] = []
    ch.basic_consume(qname, lambda c, m, p, b: held.append(m), consumer_tag="peeker")
    deadline = time.monotonic() + WAIT
    while len(held) < 2 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)
    time.sleep(0.3)  # lets an age pass: the unacked_for_seconds bound below holds however late
    unacked = _ok(api, "POST", Q + qname + "/peek", {"state": "unacked"})
    assert [m["payload"] for m in unacked] == ["m0", "m1"]
    assert [m["position"] for m in unacked] == [0, 1]
    assert all(m["consumer_tag"] == "peeker" and m["redelivered"] is False for m in unacked)
    assert unacked[0]["channel"].endswith("(1)")
    assert unacked[0]["unacked_for_seconds"] >= 0.25
    ready = _ok(api, "POST", Q + qname + "/peek", {"state": "ready"})
    assert [m["payload"] for m in ready] == ["m2"]
    ch.basic_ack(held[-1].delivery_tag, multiple=True)
    conn.close()


def test_peek_in_the_middle_of_a_paged_queue(api, broker, qname):
    """Deeper than PAGE_HIGH (a lazy queue keeps 10,000 in memory, queues/paging.py): the
    rest is read from the store."""
    total = 12_500
    conn, ch = _channel(broker)
    ch.queue_declare(qname, durable=True, arguments=LAZY)
    persistent = pika.BasicProperties(delivery_mode=2)
    for i in range(total - 1):
        ch.basic_publish("", qname, f"m{i}".encode(), persistent)
    # The last one confirmed: commits are in order, so the whole tail is readable now.
    ch.confirm_delivery()
    ch.basic_publish("", qname, f"m{total - 1}".encode(), persistent)
    page = _ok(api, "POST", Q + qname + "/peek", {"offset": 11_000, "count": 3})
    assert [(m["position"], m["payload"]) for m in page] == [
        (11_000, "m11000"), (11_001, "m11001"), (11_002, "m11002")]
    page = _ok(api, "POST", Q + qname + "/peek", {"offset": 9_999, "count": 2})
    assert [m["payload"] for m in page] == ["m9999", "m10000"]
    found = _ok(api, "POST", Q + qname + "/search", {"body_contains": "m12499", "limit": 5})
    assert [(m["position"], m["payload"]) for m in found] == [(12_499, "m12499")]
    assert ch.queue_declare(qname, durable=True, passive=True).method.message_count == total
    got = _consume_all(conn, ch, qname, total)
    assert [b for b, _ in got] == [f"m{i}".encode() for i in range(total)]
    assert not any(r for _, r in got)
    ch.queue_delete(qname)
    conn.close()


def test_move_and_delete_by_position_reach_paged_out_messages(api, broker, qname):
    """Positions past PAGE_HIGH are in the store only: they are moved and deleted all the
    same, and the queue then delivers everything else once, in order."""
    total = 12_500
    conn, ch = _channel(broker)
    ch.queue_declare(qname, durable=True, arguments=LAZY)
    ch.queue_declare(qname + "-to", durable=True)
    persistent = pika.BasicProperties(delivery_mode=2)
    for i in range(total - 1):
        ch.basic_publish("", qname, f"m{i}".encode(), persistent)
    ch.confirm_delivery()
    ch.basic_publish("", qname, f"m{total - 1}".encode(), persistent)
    moved = _ok(api, "POST", Q + qname + "/move",
                {"destination": qname + "-to", "positions": [5, 11_000, 12_499]})
    assert moved == {"moved": 3, "skipped": []}
    # Positions renumber after the move: 11,000 is now m11002, 12,000 m12002.
    page = _ok(api, "POST", Q + qname + "/peek", {"offset": 10_999, "count": 2})
    assert [m["payload"] for m in page] == ["m11001", "m11002"]
    deleted = _ok(api, "DELETE", Q + qname + "/messages", {"positions": [11_000, 12_000]})
    assert deleted == {"deleted": 2, "skipped": []}
    gone = {5, 11_000, 12_499, 11_002, 12_002}
    expected = [f"m{i}".encode() for i in range(total) if i not in gone]
    assert ch.queue_declare(qname, durable=True, passive=True).method.message_count == len(
        expected)
    got = _consume_all(conn, ch, qname, len(expected))
    assert [b for b, _ in got] == expected
    assert ch.queue_declare(qname, durable=True, passive=True).method.message_count == 0
    moved_out = _consume_all(conn, ch, qname + "-to", 3)
    assert [b for b, _ in moved_out] == [b"m5", b"m11000", b"m12499"]
    ch.queue_delete(qname)
    ch.queue_delete(qname + "-to")
    conn.close()


def test_search_matches_only(api, broker, qname):
    conn, ch = _channel(broker)
    ch.queue_declare(qname)
    _publish(ch, qname, 7)
    by_id = _ok(api, "POST", Q + qname + "/search", {"message_id": "id-4"})
    assert [(m["position"], m["payload"]) for m in by_id] == [(4, "m4")]
    by_corr = _ok(api, "POST", Q + qname + "/search", {"correlation_id": "c-1", "limit": 10})
    assert [m["payload"] for m in by_corr] == ["m1", "m4"]
    by_header = _ok(api, "POST", Q + qname + "/search", {"header": {"n": 6}})
    assert [m["payload"] for m in by_header] == ["m6"]
    by_text_header = _ok(api, "POST", Q + qname + "/search", {"header": {"kind": "k"},
                                                              "limit": 2})
    assert [m["payload"] for m in by_text_header] == ["m0", "m1"]
    both = _ok(api, "POST", Q + qname + "/search", {"correlation_id": "c-0",
                                                    "body_contains": "6"})
    assert [m["payload"] for m in both] == ["m6"]
    assert _ok(api, "POST", Q + qname + "/search", {"message_id": "nope"}) == []
    _, headers, page = api.post(Q + qname + "/search", {"correlation_id": "c-2", "limit": 1})
    assert [m["payload"] for m in page] == ["m2"] and headers["X-Scanned-Until"] == "3"
    _, headers, page = api.post(Q + qname + "/search", {"correlation_id": "c-2", "offset": 3})
    assert [m["payload"] for m in page] == ["m5"] and headers["X-Scanned-Until"] == "7"
    assert headers["X-Queue-Length"] == "7"
    got = _consume_all(conn, ch, qname, 7)
    assert got == [(f"m{i}".encode(), False) for i in range(7)]
    conn.close()


def test_bad_input_is_400_and_unknown_queue_404(api, qname):
    assert api.post(Q + "no-such-q/peek", {})[0] == 404
    for body in ({"count": -1}, {"count": "x"}, {"state": "odd"}, {"encoding": "hex"}):
        status, _, out = api.post(Q + "no-such-q/peek", body)
        assert status == 404
    api.put(Q + qname, {})
    for body in ({"count": -1}, {"count": "x"}, {"state": "odd"}, {"encoding": "hex"}):
        status, _, out = api.post(Q + qname + "/peek", body)
        assert status == 400 and out["error"] == "bad_request", body
    status, _, out = api.post(Q + qname + "/search", {"header": {"a": 1, "b": 2}})
    assert status == 400
    status, _, out = api.post(Q + qname + "/redrive", {})
    assert (status, out["reason"]) == (400, "[{key_missing,count}]")
    status, _, out = api.post(Q + qname + "/redrive", {"positions": [-1]})
    assert status == 400
    status, _, out = api.post(Q + qname + "/move", {"destination": "no-such-q", "count": 1})
    # The source exists: the answer names the queue that does not, as RabbitMQ's replies do.
    assert (status, out) == (404, {"error": "not_found",
                                   "reason": "no queue 'no-such-q' in vhost '/'"})


def _dead_letter_setup(ch: Any, origin: str, durable: bool = False) -> str:
    dlq = origin + "-dlq"
    ch.exchange_declare(origin + "-dlx", "fanout", durable=durable)
    ch.queue_declare(dlq, durable=durable)
    ch.queue_bind(dlq, origin + "-dlx")
    ch.exchange_declare(origin + "-x", "direct", durable=durable)
    ch.queue_declare(origin, durable=durable,
                     arguments={"x-dead-letter-exchange": origin + "-dlx"})
    ch.queue_bind(origin, origin + "-x", "rk")
    return dlq


def _reject_all(conn: pika.BlockingConnection, ch: Any, queue: str, n: int) -> None:
    for _ in range(n):
        method, _, _ = ch.basic_get(queue)
        ch.basic_reject(method.delivery_tag, requeue=False)


@pytest.mark.parametrize("durable", [False, True])
def test_redrive_sends_dead_letters_home(api, broker, qname, durable):
    conn, ch = _channel(broker)
    dlq = _dead_letter_setup(ch, qname, durable)
    for i in range(4):
        ch.basic_publish(qname + "-x", "rk", f"d{i}".encode(),
                         pika.BasicProperties(message_id=f"id-{i}", delivery_mode=2))
    ch.basic_publish("", dlq, b"never-dead")  # no x-death: skipped, stays
    _reject_all(conn, ch, qname, 4)
    page = _ok(api, "POST", Q + dlq + "/peek", {"count": 10})
    assert [m["payload"] for m in page] == ["never-dead", "d0", "d1", "d2", "d3"]
    dead = page[1]["properties"]["headers"]["x-death"][0]
    assert dead["reason"] == "rejected" and dead["routing-keys"] == ["rk"]
    assert dead["exchange"] == qname + "-x" and dead["queue"] == qname
    out = _ok(api, "POST", Q + dlq + "/redrive", {"positions": [2, 4]})
    assert out == {"moved": 2, "skipped": []}
    out = _ok(api, "POST", Q + dlq + "/redrive", {"count": 10})
    assert out == {"moved": 2, "skipped": [{"position": 0, "reason": "not_dead_lettered"}]}
    remaining = _ok(api, "POST", Q + dlq + "/peek", {"count": 10})
    assert [m["payload"] for m in remaining] == ["never-dead"]
    got = _consume_all(conn, ch, qname, 4)
    assert [b for b, _ in got] == [b"d1", b"d3", b"d0", b"d2"]
    assert not any(r for _, r in got)
    conn.close()


def test_move_and_delete(api, broker, qname):
    conn, ch = _channel(broker)
    ch.queue_declare(qname)
    ch.queue_declare(qname + "-2")
    _publish(ch, qname, 6)
    out = _ok(api, "POST", Q + qname + "/move", {"destination": qname + "-2", "count": 2})
    assert out == {"moved": 2, "skipped": []}
    out = _ok(api, "DELETE", Q + qname + "/messages", {"positions": [1, 3, 99]})
    assert out == {"deleted": 2, "skipped": [{"position": 99, "reason": "no_such_position"}]}
    out = _ok(api, "DELETE", Q + qname + "/messages", {"count": 1})
    assert out == {"deleted": 1, "skipped": []}
    assert [b for b, _ in _consume_all(conn, ch, qname, 1)] == [b"m4"]
    moved = _consume_all(conn, ch, qname + "-2", 2)
    assert moved == [(b"m0", False), (b"m1", False)]
    conn.close()


def test_permissions_read_on_queue_write_on_exchange(api, broker, qname):
    user = "peek-" + qname[-8:]
    assert api.put(f"/users/{user}", {"password": "pw", "tags": "management"})[0] in (201, 204)
    # read on nothing: peek refused; read on the queue but write on nothing: move refused.
    api.put(f"/permissions/%2F/{user}", {"configure": "", "write": "", "read": "^$"})
    conn, ch = _channel(broker)
    ch.queue_declare(qname)
    ch.queue_declare(qname + "-2")
    _publish(ch, qname, 2)
    other = type(api)(api.base, user, "pw")
    for method, path, body in (("POST", "/peek", {}), ("POST", "/search", {"message_id": "x"}),
                               ("POST", "/redrive", {"count": 1}),
                               ("DELETE", "/messages", {"count": 1})):
        status, _, out = other.request(method, Q + qname + path, body)
        assert (status, out) == (401, {"error": "not_authorised", "reason": "Access refused."})
    api.put(f"/permissions/%2F/{user}", {"configure": "", "write": "", "read": ".*"})
    assert len(_ok(other, "POST", Q + qname + "/peek", {})) == 2
    status, _, out = other.post(Q + qname + "/move", {"destination": qname + "-2", "count": 1})
    assert status == 401
    assert ch.queue_declare(qname, passive=True).method.message_count == 2
    api.delete(f"/users/{user}")
    conn.close()


def test_openapi_lists_the_queue_message_routes(api):
    status, _, doc = api.get("/openapi.json", auth=False)
    assert status == 200
    paths = doc["paths"]
    for verb, path in (("post", "peek"), ("post", "search"), ("post", "redrive"),
                       ("post", "move"), ("delete", "messages")):
        op = paths[f"/api/queues/{{vhost}}/{{name}}/{path}"][verb]
        assert op["x-rabbitmq-tag"] == "management" and op["security"] == [{"basic": []}]


def test_redrive_and_move_survive_a_kill_exactly_once(make_broker, qname):
    """Durable queues, persistent messages: answered means committed; after kill -9 and a
    restart every message is in exactly one place (origin or DLQ / destination)."""
    from tests.integration.conftest import HttpApi

    b = make_broker()
    api = HttpApi(b.api_url + "/api")
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
    ch = conn.channel()
    dlq = _dead_letter_setup(ch, qname, durable=True)
    ch.queue_declare(qname + "-moved", durable=True)
    ch.confirm_delivery()
    for i in range(6):
        ch.basic_publish(qname + "-x", "rk", f"d{i}".encode(),
                         pika.BasicProperties(delivery_mode=2))
    _reject_all(conn, ch, qname, 6)
    conn.close()
    assert _ok(api, "POST", Q + dlq + "/redrive", {"count": 3}) == {"moved": 3, "skipped": []}
    assert _ok(api, "POST", Q + dlq + "/move", {"destination": qname + "-moved", "count": 1}
               ) == {"moved": 1, "skipped": []}
    b.stop(kill=True)
    b.start()
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
    ch = conn.channel()
    bodies = {name: [bytes(m) for m in _drain_bodies(ch, name)]
              for name in (qname, dlq, qname + "-moved")}
    assert bodies == {qname: [b"d0", b"d1", b"d2"], dlq: [b"d4", b"d5"],
                      qname + "-moved": [b"d3"]}
    conn.close()


def _drain_bodies(ch: Any, queue: str) -> list[bytes]:
    out = []
    while True:
        method, _props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append(body)
