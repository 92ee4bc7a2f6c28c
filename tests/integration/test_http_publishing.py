"""HTTP publish as a publish like any other: the broker's one operation answers it, so a
queue's ``reject-publish`` refusal and its flow control reach the HTTP publisher as they
reach an AMQP one (RabbitMQ's plugin publishes on a channel in confirm mode)."""

from __future__ import annotations

import json
import select
import socket
from typing import Any

import pika
import pytest

from leveret.queues.queue import FLOW_HIGH
from tests.integration.conftest import HttpApi

Q = "/queues/%2F/"
PUBLISH = "/exchanges/%2F/{}/publish"
REJECTED = {"error": "bad_request",
            "reason": "rejected Unable to publish message. Check queue limits."}


def _message(routing_key: str, **properties: Any) -> dict[str, Any]:
    return {"routing_key": routing_key, "payload": "x", "payload_encoding": "string",
            "properties": properties}


def _ready(conn: pika.BlockingConnection, queue: str) -> int:
    ch = conn.channel()
    try:
        return ch.queue_declare(queue, passive=True).method.message_count
    finally:
        ch.close()


@pytest.mark.parametrize("delivery_mode", [1, 2])
def test_publish_into_a_full_reject_publish_queue_is_rejected(target, request, qname,
                                                              delivery_mode):
    """A full ``reject-publish`` queue refuses an HTTP publish with RabbitMQ's 400 (its
    channel's nack), also when another queue took the message (fanout to both)."""
    api: HttpApi = request.getfixturevalue("rabbitmq_http" if target.name == "rabbitmq"
                                           else "api")
    conn = target.connect()
    ch = conn.channel()
    full, other = qname, qname + "-other"
    try:
        ch.queue_declare(full, durable=True,
                         arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
        ch.queue_declare(other, durable=True)
        ch.exchange_declare(qname, "fanout")
        ch.queue_bind(full, qname)
        ch.queue_bind(other, qname)
        to_full = _message(full, delivery_mode=delivery_mode)
        assert api.post(PUBLISH.format("amq.default"), to_full)[::2] == (200, {"routed": True})
        assert api.post(PUBLISH.format("amq.default"), to_full)[::2] == (400, REJECTED)
        fanned = _message("k", delivery_mode=delivery_mode)
        assert api.post(PUBLISH.format(qname), fanned)[::2] == (400, REJECTED)
        assert (_ready(conn, full), _ready(conn, other)) == (1, 1)
    finally:
        for name in (full, other):
            ch.queue_delete(name)
        ch.exchange_delete(qname)


def test_publish_waits_while_its_queue_is_behind_its_consumers(broker, api, qname):
    """An HTTP publish into a queue more than FLOW_HIGH messages behind its consumers is
    answered once the queue has caught up (here: purged), as an AMQP publisher is paused."""
    publisher = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    consumer = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    try:
        ch = publisher.channel()
        ch.queue_declare(qname)
        for _ in range(FLOW_HIGH + 2):  # no consumer yet: a queue without one never throttles
            ch.basic_publish("", qname, b"")
        assert _ready(publisher, qname) == FLOW_HIGH + 2
        cch = consumer.channel()
        cch.basic_qos(prefetch_count=1)
        cch.basic_consume(qname, lambda *args: None)  # holds one delivery, never acks
        consumer.process_data_events(0)
        # The HTTP publish on a raw socket: whether an answer came is what the socket holds.
        body = json.dumps(_message(qname)).encode()
        sock = socket.create_connection(("127.0.0.1", broker.management_port))
        sock.sendall(b"POST /api/exchanges/%2F/amq.default/publish HTTP/1.1\r\n"
                     b"Host: 127.0.0.1\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n"
                     b"Content-Type: application/json\r\nConnection: close\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        # Published (the broker handled the request, and wrote whatever it answered then)...
        while api.ok(Q + qname)["messages"] != FLOW_HIGH + 3:
            consumer.process_data_events(0.05)
        # ...but not answered while the queue is behind.
        assert select.select([sock], [], [], 0)[0] == []
        assert api.delete(f"{Q}{qname}/contents")[0] == 204
        sock.settimeout(None)  # the answer comes now: waited for (pytest-timeout bounds it)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        sock.close()
        assert answer.startswith(b"HTTP/1.1 200")
        assert answer.endswith(b'{"routed":true}')
    finally:
        consumer.close()
        publisher.channel().queue_delete(qname)
        publisher.close()
