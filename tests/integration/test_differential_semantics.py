"""Semantics a pika user can observe, the same program on both brokers.

Each test is one pika program run against the ``target`` fixture: Leveret, and the real
RabbitMQ on 127.0.0.1:5672 when one runs (skipped otherwise). The expectations were
recorded from RabbitMQ 3.10.8 and hold on both, so a RabbitMQ run proves them:

* which consumers a ``multiple`` ack refills, in what order (consumer-tag byte order, each
  consumer filled to its prefetch before the next), and under a global prefetch (the
  channel's consumers round robin, in the order they were blocked);
* single-active-consumer failover while the active consumer holds unacked messages (the
  standby gets nothing until something runs the queue; the held messages come back first,
  redelivered);
* another connection's exclusive queue (405 for bind, unbind and passive declare);
* ``x-death`` across dead-letter cycles (entry order, counts) and a TTL cycle dropped;
* ``amq.rabbitmq.trace``, pre-declared in every vhost.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pika
import pytest

Target = Any
# A bound for what must happen, not a budget: each wait ends once its state holds.
WAIT = 60.0


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _pump(conn: pika.BlockingConnection, until: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not until() and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)


def _get(ch: Any, queue: str) -> tuple[Any, Any]:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        method, props, _body = ch.basic_get(queue)
        if method is not None:
            return method, props
        time.sleep(0.03)
    raise AssertionError(f"nothing arrived in {queue}")


def test_multiple_ack_refills_freed_consumers_in_tag_order(target: Target) -> None:
    conn = target.connect()
    ch = conn.channel()
    q = _name("mack")
    ch.queue_declare(q, auto_delete=True)
    tags = ["zz", "aa", "mm", "bb"]
    for i in range(26):
        ch.basic_publish("", q, b"m%d" % i)
    ch.basic_qos(prefetch_count=2)
    log: list[tuple[str, str]] = []
    last = [0]

    def on_message(_ch: Any, method: Any, _props: Any, body: bytes) -> None:
        log.append((method.consumer_tag, body.decode()))
        last[0] = method.delivery_tag

    for tag in tags:
        ch.basic_consume(q, on_message, consumer_tag=tag)
    _pump(conn, lambda: len(log) == 8, WAIT)
    assert [t for t, _ in log] == ["zz", "zz", "aa", "aa", "mm", "mm", "bb", "bb"]
    log.clear()
    ch.basic_ack(last[0], multiple=True)  # frees all four at once
    _pump(conn, lambda: len(log) == 8, WAIT)
    assert log == [("aa", "m8"), ("aa", "m9"), ("bb", "m10"), ("bb", "m11"),
                   ("mm", "m12"), ("mm", "m13"), ("zz", "m14"), ("zz", "m15")]
    log.clear()
    ch.basic_ack(last[0] - 7)  # aa's m8 alone: aa gets the next one
    _pump(conn, lambda: len(log) == 1, WAIT)
    conn.process_data_events(time_limit=0.2)
    assert log == [("aa", "m16")]
    log.clear()
    ch.basic_ack(last[0], multiple=True)  # aa had one slot taken again, the others two
    _pump(conn, lambda: len(log) == 8, WAIT)
    assert [t for t, _ in log] == ["aa", "aa", "bb", "bb", "mm", "mm", "zz", "zz"]
    conn.close()


def _prefetch_run(target: Target, tags: list[str], prefetch: int | None,
                  global_before: int | None, global_after: int | None) -> tuple[Any, Any, Any]:
    """Consumers ``tags`` on one channel of a queue of 40 messages, in that order."""
    conn = target.connect()
    ch = conn.channel()
    q = _name("gpf")
    ch.queue_declare(q, auto_delete=True)
    for i in range(40):
        ch.basic_publish("", q, b"m%d" % i)
    if global_before is not None:
        ch.basic_qos(prefetch_count=global_before, global_qos=True)
    log: list[tuple[str, str]] = []
    delivered: list[int] = []

    def on_message(_ch: Any, method: Any, _props: Any, body: bytes) -> None:
        log.append((method.consumer_tag, body.decode()))
        delivered.append(method.delivery_tag)

    for tag in tags:
        if prefetch is not None:
            ch.basic_qos(prefetch_count=prefetch)
        ch.basic_consume(q, on_message, consumer_tag=tag)
    if global_after is not None:
        ch.basic_qos(prefetch_count=global_after, global_qos=True)
    return conn, ch, (log, delivered)


def _after(conn: Any, log: list[Any], count: int, act: Callable[[], object]) -> list[Any]:
    """What ``act`` makes the broker deliver: ``count`` messages, and nothing more."""
    log.clear()
    act()
    _pump(conn, lambda: len(log) >= count, 5)
    conn.process_data_events(time_limit=0.2)
    return list(log)


@pytest.mark.parametrize("settle", ["ack", "nack"])
def test_acks_under_a_global_prefetch_refill_the_channels_consumers_round_robin(
        target: Target, settle: str) -> None:
    """The channel's limiter suspends its queues; an ack resumes the channel and its blocked
    consumers rejoin in the order they were blocked, one message each in turn: not the
    acked consumer first, nor one consumer filled to the limit. A nack without requeue
    frees room the same way."""
    conn, ch, (log, delivered) = _prefetch_run(target, ["zz", "aa", "mm", "bb"], None, 4, None)
    _pump(conn, lambda: len(log) == 4, 5)
    assert [t for t, _ in log] == ["zz"] * 4
    tags = list(delivered)

    def done(tag: int, multiple: bool = False) -> Callable[[], object]:
        if settle == "ack":
            return lambda: ch.basic_ack(tag, multiple=multiple)
        return lambda: ch.basic_nack(tag, multiple=multiple, requeue=False)

    assert _after(conn, log, 1, done(tags[0])) == [("zz", "m4")]
    assert _after(conn, log, 1, done(tags[1])) == [("aa", "m5")]
    assert _after(conn, log, 2, done(tags[3], multiple=True)) == [("mm", "m6"), ("bb", "m7")]
    assert _after(conn, log, 4, done(delivered[-1], multiple=True)) == [
        ("zz", "m8"), ("aa", "m9"), ("mm", "m10"), ("bb", "m11")]
    conn.close()


def test_acks_under_per_consumer_and_global_prefetch(target: Target) -> None:
    """Each consumer's acks reach the queue in tag order while the channel is suspended:
    those with room of their own are blocked again behind the others, then the channel
    resumes them in that order, round robin until the global limit."""
    conn, ch, (log, delivered) = _prefetch_run(target, ["zz", "aa", "mm", "bb"], 2, None, 5)
    _pump(conn, lambda: len(log) == 8, 5)  # the global limit came after: 8 delivered
    assert [t for t, _ in log] == ["zz", "zz", "aa", "aa", "mm", "mm", "bb", "bb"]
    tags = list(delivered)
    assert _after(conn, log, 0, lambda: ch.basic_ack(tags[2], multiple=True)) == []
    assert _after(conn, log, 5, lambda: ch.basic_ack(tags[-1], multiple=True)) == [
        ("mm", "m8"), ("bb", "m9"), ("zz", "m10"), ("aa", "m11"), ("mm", "m12")]
    conn.close()


def test_a_per_consumer_qos_lifts_the_global_prefetch_and_moves_nobody(
        target: Target) -> None:
    """RabbitMQ 3.10's basic.qos(global=false) drops the channel's global limit; and a
    consumer full at its own prefetch stays where it was blocked, so the next publishes go
    round robin from the consumer that was served last, the freed one joining the end."""
    conn, _, (log, _) = _prefetch_run(target, ["zz", "aa", "mm", "bb"], 2, 3, None)
    _pump(conn, lambda: len(log) == 8, 5)
    conn.process_data_events(time_limit=0.2)
    assert len(log) == 8  # not 3: the per-consumer qos lifted the global one
    conn.close()
    conn = target.connect()
    ch = conn.channel()
    q = _name("qos-order")
    ch.queue_declare(q, auto_delete=True)
    for i in range(4):
        ch.basic_publish("", q, b"m%d" % i)
    got: list[tuple[str, str]] = []
    last = [0]

    def on_message(_ch: Any, method: Any, _props: Any, body: bytes) -> None:
        got.append((method.consumer_tag, body.decode()))
        last[0] = method.delivery_tag

    for tag in ["zz", "aa", "mm", "bb"]:
        ch.basic_qos(prefetch_count=2)
        ch.basic_consume(q, on_message, consumer_tag=tag)
    _pump(conn, lambda: len(got) == 4, 5)
    assert [t for t, _ in got] == ["zz", "zz", "aa", "aa"]
    assert _after(conn, got, 0, lambda: ch.basic_ack(last[0], multiple=True)) == []

    def publish() -> None:
        for i in range(8):
            ch.basic_publish("", q, b"p%d" % i)

    assert [t for t, _ in _after(conn, got, 8, publish)] == ["aa", "mm", "bb", "zz"] * 2
    conn.close()


@pytest.mark.parametrize("how, expected_after_cancel, expected", [
    # The active consumer's connection closes: its messages come back first, redelivered.
    ("close", None, [("m0", True), ("m1", True), ("m2", False), ("m3", False), ("m4", False)]),
    # basic.cancel while it holds m0, m1: nothing for the standby until the channel closes.
    ("cancel-then-close", [],
     [("m0", True), ("m1", True), ("m2", False), ("m3", False), ("m4", False)]),
    # ... or until a requeue runs the queue (m1 is still held by the old channel).
    ("cancel-then-requeue", [], [("m0", True), ("m2", False), ("m3", False), ("m4", False)]),
    # ... and acks alone do not run it: the standby still has nothing.
    ("cancel-then-ack", [], []),
])
def test_single_active_consumer_failover_with_unacked_messages(
        target: Target, how: str, expected_after_cancel: Any, expected: Any) -> None:
    a, b = target.connect(), target.connect()
    ca, cb = a.channel(), b.channel()
    q = _name("sac")
    ca.queue_declare(q, arguments={"x-single-active-consumer": True})
    for i in range(5):
        ca.basic_publish("", q, b"m%d" % i)
    ca.basic_qos(prefetch_count=2)
    held: list[bytes] = []
    tag = ca.basic_consume(q, lambda c, m, p, body: held.append(body))
    _pump(a, lambda: len(held) == 2, WAIT)
    assert held == [b"m0", b"m1"]
    got: list[tuple[str, bool]] = []
    cb.basic_consume(q, lambda c, m, p, body: got.append((body.decode(), m.redelivered)))
    b.process_data_events(time_limit=0.3)
    assert got == []
    if how == "close":
        a.close()
    else:
        ca.basic_cancel(tag)
        _pump(b, lambda: len(got) >= len(expected_after_cancel), WAIT)
        _pump(b, lambda: False, 0.3)  # and nothing more
        assert got == expected_after_cancel
        if how == "cancel-then-close":
            ca.close()
        elif how == "cancel-then-requeue":
            ca.basic_reject(1, requeue=True)
        else:
            ca.basic_ack(0, multiple=True)
        a.process_data_events(time_limit=0.2)
    _pump(b, lambda: len(got) >= len(expected), WAIT)
    b.process_data_events(time_limit=0.3)
    assert got == expected
    cb.queue_delete(q)


def test_another_connections_exclusive_queue_is_locked(target: Target) -> None:
    owner = target.connect().channel()
    q = owner.queue_declare("", exclusive=True).method.queue
    owner.queue_bind(q, "amq.direct", "k")
    other = target.connect()
    text = (f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{q}' in vhost "
            "'/'. It could be originally declared on another connection or the exclusive "
            "property value does not match that of the original declaration.")
    for op in (lambda ch: ch.queue_unbind(q, "amq.direct", "k"),
               lambda ch: ch.queue_bind(q, "amq.direct", "k2"),
               lambda ch: ch.queue_declare(q, passive=True)):
        ch = other.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
            op(ch)
        assert (err.value.reply_code, err.value.reply_text) == (405, text)


def test_x_death_order_and_counts_across_dead_letter_cycles(target: Target) -> None:
    """Three queues rejecting into each other in a ring: the updated (or new) entry goes
    first and the others follow in reverse order, as RabbitMQ 3.10 leaves them."""
    conn = target.connect()
    ch = conn.channel()
    suffix = uuid.uuid4().hex[:6]
    names = [f"c1-{suffix}", f"b2-{suffix}", f"a3-{suffix}"]
    for i, n in enumerate(names):
        ch.queue_declare(n, arguments={"x-dead-letter-exchange": "",
                                       "x-dead-letter-routing-key": names[(i + 1) % 3]})
    ch.basic_publish("", names[0], b"m")
    seen = []
    for step in range(7):
        method, props = _get(ch, names[step % 3])
        deaths = (props.headers or {}).get("x-death", [])
        seen.append([(d["queue"][:2], d["reason"], int(d["count"])) for d in deaths])
        ch.basic_reject(method.delivery_tag, requeue=False)
    r = "rejected"
    assert seen == [
        [],
        [("c1", r, 1)],
        [("b2", r, 1), ("c1", r, 1)],
        [("a3", r, 1), ("c1", r, 1), ("b2", r, 1)],
        [("c1", r, 2), ("b2", r, 1), ("a3", r, 1)],
        [("b2", r, 2), ("a3", r, 1), ("c1", r, 2)],
        [("a3", r, 2), ("c1", r, 2), ("b2", r, 2)],
    ]
    for n in names:
        ch.queue_delete(n)


def test_a_cycle_of_expiries_is_dropped_once_no_reject_breaks_it(target: Target) -> None:
    """t1 (TTL) -> t2 (rejected by the client) -> t3 (TTL) -> t4 (TTL) -> t1 ...: the second
    time round the message reaches t2 with every entry counted; the third time the cycle
    since t2's reject has only expiries and RabbitMQ drops it."""
    conn = target.connect()
    ch = conn.channel()
    suffix = uuid.uuid4().hex[:6]
    names = [f"t{i}-{suffix}" for i in range(1, 5)]
    for i, n in enumerate(names):
        args: dict[str, Any] = {"x-dead-letter-exchange": "",
                                "x-dead-letter-routing-key": names[(i + 1) % 4]}
        if i != 1:
            args["x-message-ttl"] = 30
        ch.queue_declare(n, arguments=args)
    ch.basic_publish("", names[0], b"m")
    seen = []
    for _ in range(2):
        method, props = _get(ch, names[1])
        seen.append([(d["queue"][:2], d["reason"], int(d["count"]))
                     for d in props.headers["x-death"]])
        ch.basic_reject(method.delivery_tag, requeue=False)
    assert seen == [[("t1", "expired", 1)],
                    [("t1", "expired", 2), ("t3", "expired", 1), ("t2", "rejected", 1),
                     ("t4", "expired", 1)]]
    deadline = time.monotonic() + WAIT  # the last expiries and the dropped cycle
    while (counts := [ch.queue_declare(n, passive=True).method.message_count
                      for n in names]) != [0, 0, 0, 0] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert counts == [0, 0, 0, 0]
    for n in names:
        ch.queue_delete(n)


def test_amq_rabbitmq_trace_is_predeclared_and_reserved(target: Target) -> None:
    conn = target.connect()
    ch = conn.channel()
    ch.exchange_declare("amq.rabbitmq.trace", passive=True)
    ch.exchange_declare("amq.rabbitmq.trace", "topic", durable=True, internal=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        conn.channel().exchange_declare("amq.rabbitmq.trace", "fanout", durable=True,
                                        internal=True)
    assert err.value.reply_code == 406


def test_confirms_of_refused_and_unroutable_publishes_per_tag(target: Target) -> None:
    """A burst into a full ``reject-publish`` queue, with unroutable publishes among them:
    each delivery tag is acked or nacked the same way on both brokers. The order and
    batching of the frames differ (README, "Differences from RabbitMQ"): RabbitMQ acks the
    unroutable ones at once and the queue's ones when the queue answers; Leveret nacks a
    refused publish at once and acks the rest, ``multiple``, at the end of the read."""
    conn = target.connect()
    ch = conn.channel()
    q = _name("confirm-full")
    ch.queue_declare(q, arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    frames: list[tuple[str, int, bool]] = []
    impl = ch._impl
    impl.confirm_delivery(
        lambda frame: frames.append((type(frame.method).__name__, frame.method.delivery_tag,
                                     frame.method.multiple)))
    keys = [q, "nowhere", q, q, "nowhere", q, q]
    for key in keys:
        impl.basic_publish("", key, b"x")

    def settled() -> dict[int, str]:
        outcome: dict[int, str] = {}
        for kind, tag, multiple in frames:
            for t in (range(1, tag + 1) if multiple else (tag,)):
                outcome.setdefault(t, kind)
        return outcome

    _pump(conn, lambda: len(settled()) == len(keys), WAIT)
    outcome = settled()
    assert outcome == {1: "Ack", 2: "Ack", 3: "Ack", 4: "Nack", 5: "Ack", 6: "Nack", 7: "Nack"}
    ch.queue_delete(q)
