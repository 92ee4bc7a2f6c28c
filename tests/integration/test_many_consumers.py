"""Many consumers on one channel: no freeze, RabbitMQ's round-robin.

One pika channel with ``basic_qos(10)`` and hundreds of consumers on one queue,
with more messages than their prefetch windows hold, acked one by one. Before
the consumer ring (``queues/consumer_ring.py``) every ack resumed every consumer
of the channel and each resume scanned every consumer: O(C^2) per ack, and with
300 consumers the run below took minutes while a second client could not even
open a connection. Checked here: every message is consumed, round-robin, and
another client gets in while the first one churns. How long both take is a
measurement (``bench/many_consumers.py``), not an assertion: on a machine busy with
other work any bound is either too tight or too loose to catch the freeze.

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
# A hang guard for states that must come, not a budget: each wait ends once they hold.
WAIT = 300.0


def _params(port: int) -> pika.ConnectionParameters:
    return pika.ConnectionParameters("127.0.0.1", port, "/",
                                     pika.PlainCredentials("guest", "guest"),
                                     socket_timeout=WAIT,
                                     blocked_connection_timeout=WAIT)


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

    connected: list[bool] = []

    def connect_meanwhile() -> None:
        try:
            other = pika.BlockingConnection(_params(port))
            connected.append(other.is_open)
            other.close()
        except Exception:
            connected.append(False)

    prober: threading.Thread | None = None
    started = time.monotonic()
    deadline = started + WAIT
    while sum(got) < MESSAGES and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)
        if prober is None and sum(got) >= CONSUMERS * PREFETCH:
            # The windows are full and every ack now dispatches from the backlog.
            prober = threading.Thread(target=connect_meanwhile, daemon=True)
            prober.start()
    consumed = sum(got)
    if prober is not None:
        prober.join(WAIT)
    conn.close()
    assert consumed == MESSAGES, f"only {consumed} of {MESSAGES} consumed in {WAIT} s"
    assert connected == [True]
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
            deadline = time.monotonic() + WAIT
            while len(log) < want and time.monotonic() < deadline:
                conn.process_data_events(time_limit=0.01)

    publish(4)  # a, b, c, then a is full: b
    ch.basic_ack(held.pop())
    publish(4)
    conn.close()
    assert log == ["a", "b", "c", "b", "c", "b", "a", "c"]
