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
# Upper bound for anything that should happen "now": a hang guard, not a budget (a wait
# ends as soon as its state holds), generous because a busy machine can be many times slower.
WAIT = 60.0


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
    """Pump ``conn`` until ``done()`` or the timeout; True once ``done()`` held (it is not
    asked again: a state seen is not lost to one that moved on)."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        conn.process_data_events(time_limit=POLL)
    return True


def settle(conn: pika.BlockingConnection, quiet: float = 0.15) -> None:
    """Pump ``conn`` for ``quiet`` seconds: lets anything *not* expected show up."""
    deadline = time.monotonic() + quiet
    while time.monotonic() < deadline:
        conn.process_data_events(time_limit=POLL)


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    """``predicate``'s first truthy value, polled; fails naming ``what`` after ``timeout``
    (a hang guard, not a budget)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def dedupe_props(key: object = None, ttl: object = None, persistent: bool = False,
                 **extra: object) -> pika.BasicProperties:
    """Properties carrying a deduplication key (``x-deduplication-header``), the key's
    ``x-cache-ttl`` and any other headers."""
    headers: dict[str, object] = dict(extra)
    if key is not None:
        headers["x-deduplication-header"] = key
    if ttl is not None:
        headers["x-cache-ttl"] = ttl
    return pika.BasicProperties(headers=headers or None,
                                delivery_mode=2 if persistent else None)


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


# -- the management HTTP API ----------------------------------------------------------------

class HttpApi:
    """A tiny blocking client for the management API (stdlib only): ``(status, headers,
    body)`` where body is the decoded JSON, or the text when it is not JSON."""

    def __init__(self, base: str, user: str = "guest", password: str = "guest") -> None:
        self.base = base
        self.user = user
        self.password = password

    def request(self, method: str, path: str, body: Any = None, raw: bytes | None = None,
                headers: dict[str, str] | None = None, auth: bool = True) -> tuple[int, Any, Any]:
        import base64
        import json
        import urllib.error
        import urllib.request

        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if auth:
            token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                status, hdrs, text = resp.status, resp.headers, resp.read().decode()
        except urllib.error.HTTPError as exc:
            status, hdrs, text = exc.code, exc.headers, exc.read().decode()
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = text
        return status, hdrs, parsed

    def get(self, path: str, **kw: Any) -> tuple[int, Any, Any]:
        return self.request("GET", path, **kw)

    def put(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any, Any]:
        return self.request("PUT", path, body if body is not None else {}, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any, Any]:
        return self.request("POST", path, body if body is not None else {}, **kw)

    def delete(self, path: str, **kw: Any) -> tuple[int, Any, Any]:
        return self.request("DELETE", path, **kw)

    def ok(self, path: str) -> Any:
        status, _, body = self.get(path)
        assert status == 200, (path, status, body)
        return body


@pytest.fixture
def api(broker: Any) -> HttpApi:
    """The session broker's management API."""
    return HttpApi(broker.api_url + "/api")


@pytest.fixture
def rabbitmq_http() -> HttpApi:
    """The real RabbitMQ's management API on 127.0.0.1:15672 (skips when none answers)."""
    candidate = HttpApi("http://127.0.0.1:15672/api")
    try:
        status, _, _ = candidate.get("/overview")
    except OSError:
        status = 0
    if status != 200:
        pytest.skip("no RabbitMQ management API on 127.0.0.1:15672")
    return candidate

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
