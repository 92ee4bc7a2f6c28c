"""Stream queues over AMQP 0-9-1: the same cases against Leveret and RabbitMQ 3.10.

Each case runs on both brokers (the ``target`` fixture; RabbitMQ's runs skip
when none answers on 127.0.0.1:5672) and what the client saw is compared to
one expectation. Where Leveret answers differently on purpose, the case says
so with both answers (``differs``), each pinned on its own broker; the
reasons are in docs/differences.md:

* 3.10 closes the connection with 541 INTERNAL_ERROR for some malformed
  ``x-max-age`` and ``x-stream-offset`` values; Leveret answers the 406 that
  3.10 gives the other malformed values.
* 3.10 closes the connection with 540 on a nack or reject from a stream
  consumer; Leveret (as RabbitMQ 3.11+) gives the credit back and goes on.
* 3.10 has no stream filters and accepts any ``x-stream-filter-size-bytes``;
  Leveret checks it as RabbitMQ 3.13 does (16..255).
* 3.10's classic queues lose what they dead-letter to a stream; Leveret
  delivers it (as later RabbitMQ versions do).
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable
from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

WAIT = 60.0  # a hang guard: every wait below ends as soon as its state holds
QUIET = 0.3  # seconds in which nothing more may arrive (the credit cases)
STREAM = {"x-queue-type": "stream"}


def observe(conn: pika.BlockingConnection, fn: Callable[[Any], Any]) -> tuple[Any, ...]:
    """Run ``fn(channel)``: ("ok", result), or how the broker closed what."""
    ch = conn.channel()
    try:
        return ("ok", fn(ch))
    except ChannelClosedByBroker as exc:
        return ("channel", exc.reply_code, exc.reply_text)
    except ConnectionClosedByBroker as exc:
        return ("connection", exc.reply_code, exc.reply_text)


def pump(conn: pika.BlockingConnection, done: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.02)


def quiet(conn: pika.BlockingConnection, seconds: float = QUIET) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.02)


@pytest.fixture
def stream(target: Any) -> Any:
    """A fresh stream name on ``target``, deleted afterwards."""
    name = f"stream-{uuid.uuid4().hex[:10]}"
    yield name
    conn = target.connect()
    conn.channel().queue_delete(name)


def declare(name: str, **kw: Any) -> Callable[[Any], Any]:
    arguments = {**STREAM, **kw.pop("arguments", {})}
    kw.setdefault("durable", True)

    def run(ch: Any) -> Any:
        ok = ch.queue_declare(name, arguments=arguments, **kw).method
        return ok.message_count, ok.consumer_count

    return run


def differs(target: Any, leveret: Any, rabbitmq: Any) -> Any:
    return leveret if target.name == "leveret" else rabbitmq


def pre(text: str) -> str:
    return "PRECONDITION_FAILED - " + text


# -- declare ------------------------------------------------------------------------------

def test_declare_and_its_refusals(target: Any, stream: str) -> None:
    conn = target.connect()
    assert observe(conn, declare(stream)) == ("ok", (0, 0))
    assert observe(conn, declare(stream)) == ("ok", (0, 0))
    other = stream + ".x"  # never created: every declare of it is refused
    qx = f"queue '{other}' in vhost '/'"
    cases: list[tuple[Callable[[Any], Any], tuple[Any, ...]]] = [
        (declare(other, auto_delete=True),
         ("channel", 406, pre(f"invalid property 'auto-delete' for {qx}"))),
        (declare(other, exclusive=True),
         ("channel", 406, pre(f"invalid property 'exclusive-owner' for {qx}"))),
        (declare(other, durable=False),
         ("channel", 406, pre(f"invalid property 'non-durable' for {qx}"))),
        (declare(""),
         ("channel", 406, pre("Cannot declare a server-named queue for type rabbit_stream_queue"))),
    ]
    for name, value in [("x-message-ttl", 1000), ("x-max-priority", 5),
                        ("x-dead-letter-exchange", "dlx"), ("x-overflow", "reject-publish"),
                        ("x-expires", 1000), ("x-single-active-consumer", True),
                        ("x-max-length", 10), ("x-message-ttl", "bogus")]:
        cases.append((declare(other, arguments={name: value}), (
            "channel", 406,
            pre(f"invalid arg '{name}' for {qx} of queue type rabbit_stream_queue"))))
    for value, term in [("1A", "invalid_max_age"), ("0s", "invalid_max_age"),
                        ("7d", "invalid_max_age"), (5, "{unacceptable_type,signedint}")]:
        cases.append((declare(other, arguments={"x-max-age": value}),
                      ("channel", 406, pre(f"invalid arg 'x-max-age' for {qx}: {term}"))))
    cases += [
        (declare(other, arguments={"x-stream-max-segment-size-bytes": 3_000_001_000}),
         ("channel", 406, pre("Exceeded max value for x-stream-max-segment-size-bytes"))),
        (declare(other, arguments={"x-stream-max-segment-size-bytes": -1}),
         ("channel", 406,
          pre(f"invalid arg 'x-stream-max-segment-size-bytes' for {qx}: {{value_negative,-1}}"))),
        (declare(other, arguments={"x-max-length-bytes": "x"}),
         ("channel", 406,
          pre(f"invalid arg 'x-max-length-bytes' for {qx}: \"expected integer, got longstr\""))),
        (declare(other, arguments={"x-initial-cluster-size": 0}),
         ("channel", 406, pre(f"invalid arg 'x-initial-cluster-size' for {qx}: {{value_zero,0}}"))),
        (declare(other, arguments={"x-queue-leader-locator": "bogus"}),
         ("channel", 406,
          pre(f"invalid arg 'x-queue-leader-locator' for {qx}: invalid_queue_locator_arg"))),
    ]
    for fn, expected in cases:
        assert observe(conn, fn) == expected
    aged = stream + ".aged"
    try:
        assert observe(conn, declare(aged, arguments={"x-max-age": "7D"})) == ("ok", (0, 0))
        assert observe(conn, declare(aged, arguments={"x-max-age": "8D"})) == (
            "channel", 406, pre(f"inequivalent arg 'x-max-age' for queue '{aged}' in vhost '/': "
                                "received '8D' but current is '7D'"))
    finally:
        conn.channel().queue_delete(aged)
    assert observe(conn, declare(stream, durable=True)) == ("ok", (0, 0))


def test_accepted_arguments(target: Any, stream: str) -> None:
    conn = target.connect()
    for i, args in enumerate([{"x-max-age": "1Y"}, {"x-max-age": "10s"}, {"x-max-age": "10M"},
                              {"x-queue-leader-locator": "client-local"},
                              {"x-stream-max-segment-size-bytes": 3_000_000_000},
                              {"x-initial-cluster-size": 3}, {"x-max-length-bytes": 10_000},
                              {"x-custom-thing": 1}]):
        name = f"{stream}.{i}"
        try:
            assert observe(conn, declare(name, arguments=args)) == ("ok", (0, 0)), args
        finally:
            conn.channel().queue_delete(name)


def test_deliberate_declare_differences(target: Any, stream: str) -> None:
    conn = target.connect()
    qx = f"queue '{stream}' in vhost '/'"
    for value in ("D", "-1s"):
        assert observe(conn, declare(stream, arguments={"x-max-age": value})) == differs(
            target, ("channel", 406, pre(f"invalid arg 'x-max-age' for {qx}: invalid_max_age")),
            ("connection", 541, "INTERNAL_ERROR"))
        conn = target.connect()
    for size in (15, 256, "32"):
        got = observe(conn, declare(stream, arguments={"x-stream-filter-size-bytes": size}))
        assert got == differs(target, (
            "channel", 406, pre("Invalid value for  x-stream-filter-size-bytes")), ("ok", (0, 0)))
        conn.channel().queue_delete(stream)


# -- refused operations and consumer arguments ---------------------------------------------

def consume(name: str, prefetch: int | None = 10, global_qos: bool = False,
            auto_ack: bool = False, arguments: dict[str, Any] | None = None,
            local_first: bool = False) -> Callable[[Any], Any]:
    def run(ch: Any) -> Any:
        if local_first:
            ch.basic_qos(prefetch_count=5)
        if prefetch is not None:
            ch.basic_qos(prefetch_count=prefetch, global_qos=global_qos)
        ch.basic_consume(name, lambda *a: None, auto_ack=auto_ack, arguments=arguments)
        ch.connection.process_data_events(time_limit=QUIET)
        return "consuming"

    return run


def test_consume_refusals(target: Any, stream: str) -> None:
    conn = target.connect()
    observe(conn, declare(stream))
    q = f"queue '{stream}' in vhost '/'"
    not_set = ("channel", 406, pre(f"consumer prefetch count is not set for '{q}'"))
    cases = [
        (consume(stream, prefetch=None), not_set),
        (consume(stream, global_qos=True), not_set),
        (consume(stream, global_qos=True, local_first=True),
         ("connection", 540, f"NOT_IMPLEMENTED - {q} does not support global qos")),
        (consume(stream, auto_ack=True), ("connection", 540, "NOT_IMPLEMENTED - automatic "
                                          f"acknowledgement not supported by stream queues {q}")),
        (consume(stream, arguments={"x-priority": 5}), (
            "channel", 406, pre(f"invalid arg 'x-priority' for {q} of queue type "
                                "rabbit_stream_queue"))),
        (consume(stream, arguments={"x-stream-offset": "0s"}), (
            "channel", 406, pre(f"invalid arg 'x-stream-offset' for {q}: "
                                '{invalid_stream_offset_arg,{longstr,<<"0s">>}}'))),
        (consume(stream, arguments={"x-other": 1}), ("ok", "consuming")),
        (lambda ch: ch.basic_get(stream), (
            "connection", 540, f"NOT_IMPLEMENTED - basic.get not supported by stream queues {q}")),
        (lambda ch: ch.queue_purge(stream), (
            "connection", 540,
            f"NOT_IMPLEMENTED - queue.purge not supported by stream queues {q}")),
    ]
    for fn, expected in cases:
        if not conn.is_open:
            conn = target.connect()
        assert observe(conn, fn) == expected
    conn = target.connect()
    assert observe(conn, consume(stream, arguments={"x-stream-offset": "bogus"})) == differs(
        target, ("channel", 406, pre(f"invalid arg 'x-stream-offset' for {q}: "
                                     '{invalid_stream_offset_arg,{longstr,<<"bogus">>}}')),
        ("connection", 541, "INTERNAL_ERROR"))


# -- reading ---------------------------------------------------------------------------------

def publish(conn: pika.BlockingConnection, name: str, count: int, start: int = 0) -> None:
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(start, start + count):
        ch.basic_publish("", name, f"m{i}".encode(),
                         pika.BasicProperties(headers={"n": i}))
    ch.close()


def message_count(conn: pika.BlockingConnection, name: str, want: int) -> int:
    """The declare-ok count, polled: RabbitMQ 3.10's lags behind the confirms."""
    ch = conn.channel()
    deadline = time.monotonic() + WAIT
    while True:
        count = ch.queue_declare(name, durable=True, arguments=STREAM).method.message_count
        if count == want or time.monotonic() > deadline:
            ch.close()
            return int(count)
        quiet(conn, 0.2)


class Reader:
    """A consumer recording (offset, body) of each delivery; acks them if ``ack``."""

    def __init__(self, conn: pika.BlockingConnection, name: str, prefetch: int,
                 offset: Any = "first", ack: bool = True) -> None:
        self.conn = conn
        self.ch = conn.channel()
        self.ch.basic_qos(prefetch_count=prefetch)
        self.got: list[tuple[int, bytes]] = []
        self.tags: list[int] = []
        self.headers: list[dict[str, Any]] = []
        self.ack = ack
        self.cancelled = False
        self.ch.add_on_cancel_callback(lambda _frame: setattr(self, "cancelled", True))
        args = {} if offset is None else {"x-stream-offset": offset}
        self.tag = self.ch.basic_consume(name, self._on, arguments=args)

    def _on(self, ch: Any, method: Any, props: Any, body: bytes) -> None:
        self.got.append((props.headers["x-stream-offset"], body))
        self.headers.append(props.headers)
        self.tags.append(method.delivery_tag)
        if self.ack:
            ch.basic_ack(method.delivery_tag)

    def wait_for(self, count: int) -> list[tuple[int, bytes]]:
        pump(self.conn, lambda: len(self.got) >= count)
        return self.got


def test_every_consumer_reads_the_whole_log_with_offsets(target: Any, stream: str) -> None:
    conn = target.connect()
    observe(conn, declare(stream))
    publish(conn, stream, 100)
    assert message_count(conn, stream, 100) == 100
    one, two = Reader(conn, stream, 10), Reader(conn, stream, 10)
    expected = [(i, f"m{i}".encode()) for i in range(100)]
    assert one.wait_for(100) == expected
    assert two.wait_for(100) == expected
    assert all(type(h["x-stream-offset"]) is not bool for h in one.headers)
    assert one.headers[7]["n"] == 7
    quiet(conn)
    assert len(one.got) == 100
    assert message_count(conn, stream, 100) == 100


def test_credit_is_the_prefetch_and_acks_give_it_back(target: Any, stream: str) -> None:
    conn = target.connect()
    observe(conn, declare(stream))
    publish(conn, stream, 10)
    message_count(conn, stream, 10)
    reader = Reader(conn, stream, 2, ack=False)
    reader.wait_for(2)
    quiet(conn)
    assert [o for o, _ in reader.got] == [0, 1]
    reader.ch.basic_ack(reader.tags[0])
    reader.wait_for(3)
    quiet(conn)
    assert [o for o, _ in reader.got] == [0, 1, 2]
    reader.ch.basic_ack(reader.tags[2], multiple=True)
    reader.wait_for(5)
    quiet(conn)
    assert [o for o, _ in reader.got] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("settle", ["nack", "reject"])
def test_nack_and_reject_give_credit_without_redelivery(target: Any, stream: str,
                                                        settle: str) -> None:
    conn = target.connect()
    observe(conn, declare(stream))
    publish(conn, stream, 5)
    message_count(conn, stream, 5)
    reader = Reader(conn, stream, 1, ack=False)
    reader.wait_for(1)

    def refuse() -> None:
        if settle == "nack":
            reader.ch.basic_nack(reader.tags[0], requeue=True)
        else:
            reader.ch.basic_reject(reader.tags[0])
        reader.wait_for(2)

    try:
        refuse()
        seen: tuple[Any, ...] = ("ok", [o for o, _ in reader.got], reader.ch.is_open)
    except ConnectionClosedByBroker as exc:
        seen = ("connection", exc.reply_code)
    assert seen == differs(target, ("ok", [0, 1], True), ("connection", 540))
    if target.name == "leveret":
        assert message_count(conn, stream, 5) == 5


def test_offset_specifications(target: Any, stream: str) -> None:
    conn = target.connect()
    observe(conn, declare(stream))
    publish(conn, stream, 100)
    message_count(conn, stream, 100)
    now = datetime.datetime.now(datetime.UTC)

    def first_offsets(offset: Any, count: int) -> list[int]:
        reader = Reader(conn, stream, 200, offset)
        reader.wait_for(count)
        quiet(conn)
        reader.ch.close()
        return [o for o, _ in reader.got]

    assert first_offsets(50, 50) == list(range(50, 100))
    assert first_offsets(-5, 100) == list(range(100))
    assert first_offsets(now - datetime.timedelta(hours=1), 100) == list(range(100))
    assert first_offsets("100s", 100) == list(range(100))
    assert first_offsets(now + datetime.timedelta(hours=1), 0) == []
    assert first_offsets(10**9, 0) == []
    last = first_offsets("last", 1)
    assert last and last[-1] == 99 and last == list(range(last[0], 100))
    # next (and no argument): only what is published after consume-ok.
    for offset in ("next", None):
        reader = Reader(conn, stream, 10, offset)
        quiet(conn)
        publish(conn, stream, 2, start=1000)
        reader.wait_for(2)
        assert [b for _, b in reader.got] == [b"m1000", b"m1001"]
        reader.ch.close()


def test_deleting_a_stream_cancels_its_consumers(target: Any, stream: str) -> None:
    conn = target.connect()
    observe(conn, declare(stream))
    reader = Reader(conn, stream, 10)
    quiet(conn)
    target.connect().channel().queue_delete(stream)
    pump(conn, lambda: reader.cancelled)
    assert reader.cancelled


def test_a_stream_is_a_dead_letter_target(target: Any, stream: str) -> None:
    """Leveret dead-letters into a stream (as RabbitMQ 3.11+); 3.10's classic queues drop
    what they dead-letter to a stream (seen: nothing arrives)."""
    conn = target.connect()
    observe(conn, declare(stream))
    ch = conn.channel()
    source = stream + ".src"
    ch.queue_declare(source, arguments={"x-dead-letter-exchange": "",
                                        "x-dead-letter-routing-key": stream})
    try:
        ch.basic_publish("", source, b"dead", pika.BasicProperties(expiration="0"))
        reader = Reader(conn, stream, 10)
        if target.name == "leveret":
            assert [b for _, b in reader.wait_for(1)] == [b"dead"]
            assert reader.headers[0]["x-death"][0]["reason"] == "expired"
        else:
            quiet(conn, 2.0)
            assert reader.got == []
    finally:
        conn.channel().queue_delete(source)


@pytest.mark.parametrize("side", ["leveret", "rabbitmq"])
def test_http_get_and_purge_are_refused(request: pytest.FixtureRequest, side: str) -> None:
    """The management API's get and purge of a stream: 400 with RabbitMQ's reasons."""
    http = request.getfixturevalue("api" if side == "leveret" else "rabbitmq_http")
    name = f"stream-{uuid.uuid4().hex[:10]}"
    status, _, _ = http.put(f"/queues/%2F/{name}", {"durable": True, "arguments": STREAM})
    assert status == 201
    try:
        # RabbitMQ answers 500 until the stream's log process is up (seconds when busy).
        deadline = time.monotonic() + WAIT
        while True:
            got = http.post(f"/queues/%2F/{name}/get", {
                "count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"})
            if got[0] != 500 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert (got[0], got[2]) == (400, {
            "error": "bad_request",
            "reason": f"540 basic.get not supported by stream queues queue '{name}' in vhost '/'"})
        got = http.delete(f"/queues/%2F/{name}/contents")
        assert (got[0], got[2]) == (400, {
            "error": "bad_request",
            "reason": f"queue.purge not supported by stream queues queue '{name}' in vhost '/'"})
    finally:
        http.delete(f"/queues/%2F/{name}")
