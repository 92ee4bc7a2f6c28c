"""Helpers for the pika integration tests (``test_pika_*.py``).

``amqp`` is the broker under test seen from a client: a connection factory
whose connections are closed after the test, plus small polling helpers so
tests wait only as long as they must. It points at the session ``broker``
fixture; with ``LEVERET_PIKA_TARGET=rabbitmq`` it points at a real RabbitMQ
on 127.0.0.1:5672 instead, which is how these tests were checked to assert
RabbitMQ's behaviour and not just Leveret's::

    LEVERET_PIKA_TARGET=rabbitmq pytest tests/integration/test_pika_*.py -q
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pytest

POLL = 0.01  # seconds per process_data_events slice while polling
WAIT = 3.0  # upper bound for anything that should happen "now"


class AmqpTarget:
    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.url = f"amqp://guest:guest@{host}:{port}/%2F"
        self.is_rabbitmq = False
        self._open: list[pika.BlockingConnection] = []

    def params(self, **kw: Any) -> pika.ConnectionParameters:
        kw.setdefault("credentials", pika.PlainCredentials("guest", "guest"))
        kw.setdefault("blocked_connection_timeout", 10)
        return pika.ConnectionParameters(self.host, self.port, "/", **kw)

    def connect(self, **kw: Any) -> pika.BlockingConnection:
        conn = pika.BlockingConnection(self.params(**kw))
        self._open.append(conn)
        return conn

    def channel(self, **kw: Any) -> pika.adapters.blocking_connection.BlockingChannel:
        return self.connect(**kw).channel()

    def close_all(self) -> None:
        for conn in self._open:
            if conn.is_open:
                with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                    conn.close()  # may already be broken by the test


@pytest.fixture
def amqp(request: pytest.FixtureRequest) -> Iterator[AmqpTarget]:
    if os.environ.get("LEVERET_PIKA_TARGET") == "rabbitmq":
        target = AmqpTarget("127.0.0.1", 5672)
        target.is_rabbitmq = True
    else:
        b = request.getfixturevalue("broker")
        target = AmqpTarget(b.host, b.port)
    yield target
    target.close_all()


def poll(conn: pika.BlockingConnection, done: Callable[[], bool], timeout: float = WAIT) -> bool:
    """Pump ``conn`` until ``done()`` or the timeout; returns ``done()``."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        conn.process_data_events(time_limit=POLL)
    return done()


def settle(conn: pika.BlockingConnection, quiet: float = 0.15) -> None:
    """Pump ``conn`` for ``quiet`` seconds: lets anything *not* expected show up."""
    deadline = time.monotonic() + quiet
    while time.monotonic() < deadline:
        conn.process_data_events(time_limit=POLL)


def ready_count(ch: Any, queue: str) -> int:
    return ch.queue_declare(queue, passive=True).method.message_count


def get_all(ch: Any, queue: str, auto_ack: bool = True) -> list[bytes]:
    """Drain ``queue`` with basic.get; returns the bodies in order."""
    out = []
    while True:
        method, _props, body = ch.basic_get(queue, auto_ack=auto_ack)
        if method is None:
            return out
        out.append(body)


@pytest.fixture
def helpers() -> Any:
    """The module-level helpers, for tests (conftest modules cannot be imported)."""

    class H:
        poll = staticmethod(poll)
        settle = staticmethod(settle)
        ready_count = staticmethod(ready_count)
        get_all = staticmethod(get_all)

    return H


# -- differential targets --------------------------------------------------------

RABBITMQ = ("127.0.0.1", 5672)


def _rabbitmq_up() -> bool:
    try:
        with socket.create_connection(RABBITMQ, timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(params=["leveret", "rabbitmq"])
def target(request: pytest.FixtureRequest) -> Any:
    """Leveret, and a real RabbitMQ on 127.0.0.1:5672 when one answers (skipped otherwise):
    a test taking it proves its expectation on RabbitMQ itself."""
    if request.param == "rabbitmq":
        if not _rabbitmq_up():
            pytest.skip("no RabbitMQ on 127.0.0.1:5672")
        host, port = RABBITMQ
    else:
        b = request.getfixturevalue("broker")
        host, port = b.host, b.port
    conns: list[pika.BlockingConnection] = []

    class Target:
        name = request.param
        url = f"amqp://guest:guest@{host}:{port}/%2F"

        @staticmethod
        def connect() -> pika.BlockingConnection:
            conn = pika.BlockingConnection(pika.ConnectionParameters(
                host, port, "/", pika.PlainCredentials("guest", "guest")))
            conns.append(conn)
            return conn

    yield Target
    for conn in conns:
        if conn.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                conn.close()
