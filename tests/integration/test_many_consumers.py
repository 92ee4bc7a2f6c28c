"""Many consumers on one channel: no freeze (issue 17, item 1), RabbitMQ's round-robin.

One pika channel with ``basic_qos(10)`` and hundreds of consumers on one queue,
with more messages than their prefetch windows hold, acked one by one. Before
the consumer ring (``queues/consumer_ring.py``) every ack resumed every consumer
of the channel and each resume scanned every consumer: O(C^2) per ack, and with
300 consumers the run below took minutes while a second client could not even
open a connection. Both are bounded here: the whole run, and the time another
client needs to connect while the first one churns.

A private broker: a frozen one must not take the session broker down with it.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid

import pika
import pytest

CONSUMERS = 300
PREFETCH = 10
MESSAGES = 6_000  # twice what the prefetch windows hold: acks must dispatch the rest
RUN_BUDGET = 15.0  # seconds for the whole consume: about 3 s after the fix, 30 s before
CONNECT_BUDGET = 1.0  # seconds for another client to connect meanwhile


def _params(port: int) -> pika.ConnectionParameters:
    return pika.ConnectionParameters("127.0.0.1", port, "/",
                                     pika.PlainCredentials("guest", "guest"),
                                     socket_timeout=RUN_BUDGET,
                                     blocked_connection_timeout=RUN_BUDGET)


def test_many_consumers_on_one_channel_do_not_freeze_the_broker(make_broker) -> None:
    port = make_broker().port
    qname = f"many-{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(_params(port))
    ch = conn.channel()
    ch.queue_declare(qname)
    for i in range(MESSAGES):
        ch.basic_publish("", qname, b"m%d" % i)
    ch.basic_qos(prefetch_count=PREFETCH)
    got: list[int] = [0] * CONSUMERS

    def on_message(index: int):
        def cb(channel, method, _props, _body) -> None:
            got[index] += 1
            channel.basic_ack(method.delivery_tag)
        return cb

    for i in range(CONSUMERS):
        ch.basic_consume(qname, on_message(i))

    connect_times: list[float] = []

    def connect_meanwhile() -> None:
        started = time.monotonic()
        try:
            other = pika.BlockingConnection(_params(port))
            connect_times.append(time.monotonic() - started)
            other.close()
        except Exception:  # noqa: BLE001 - a timeout is the failure measured below
            connect_times.append(float("inf"))

    prober: threading.Thread | None = None
    started = time.monotonic()
    deadline = started + RUN_BUDGET
    while sum(got) < MESSAGES and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)
        if prober is None and sum(got) >= CONSUMERS * PREFETCH:
            # The windows are full and every ack now dispatches from the backlog.
            prober = threading.Thread(target=connect_meanwhile, daemon=True)
            prober.start()
    consumed, elapsed = sum(got), time.monotonic() - started
    if prober is not None:
        prober.join(RUN_BUDGET)
    conn.close()
    print(f"{consumed} messages in {elapsed:.1f} s; another client connected in {connect_times}")
    assert consumed == MESSAGES, f"only {consumed} of {MESSAGES} consumed in {RUN_BUDGET} s"
    assert connect_times and connect_times[0] < CONNECT_BUDGET, connect_times
    # Round-robin among equal-priority consumers: every one of them got its share.
    assert min(got) >= PREFETCH, sorted(got)[:5]


RABBITMQ = ("127.0.0.1", 5672)


@pytest.fixture(params=["leveret", "rabbitmq"])
def port(request: pytest.FixtureRequest) -> int:
    if request.param == "rabbitmq":
        try:
            socket.create_connection(RABBITMQ, timeout=0.5).close()
        except OSError:
            pytest.skip("no RabbitMQ on 127.0.0.1:5672")
        return RABBITMQ[1]
    return request.getfixturevalue("broker").port


def test_a_consumer_whose_credit_returns_rejoins_behind_its_peers(port: int) -> None:
    """RabbitMQ's block/unblock (rabbit_queue_consumers): a consumer that met its
    prefetch limit leaves the rotation and, once acked, comes back at its end.
    Recorded on RabbitMQ 3.10; Leveret before the consumer ring served it first."""
    conn = pika.BlockingConnection(_params(port))
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    log: list[str] = []
    held: list[int] = []

    def consumer(name: str):
        def cb(_ch, method, _props, _body) -> None:
            log.append(name)
            if name == "a":
                held.append(method.delivery_tag)
        return cb

    ch.basic_qos(prefetch_count=1)
    ch.basic_consume(q, consumer("a"))
    ch.basic_qos(prefetch_count=100)
    ch.basic_consume(q, consumer("b"))
    ch.basic_consume(q, consumer("c"))

    def publish(n: int) -> None:
        for _ in range(n):
            want = len(log) + 1
            ch.basic_publish("", q, b"m")
            deadline = time.monotonic() + 3
            while len(log) < want and time.monotonic() < deadline:
                conn.process_data_events(time_limit=0.01)

    publish(4)  # a, b, c, then a is full: b
    ch.basic_ack(held.pop())
    conn.process_data_events(time_limit=0.1)
    publish(4)
    conn.close()
    assert log == ["a", "b", "c", "b", "c", "b", "a", "c"]
