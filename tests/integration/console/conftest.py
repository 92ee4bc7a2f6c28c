"""The console's browser tests: each module gets its own broker and one browser session,
a pika channel per test, and fails any test after which the page logged a JavaScript error."""

from __future__ import annotations

from collections.abc import Iterator

import pika
import pytest

from tests.conftest import BrokerProcess

from .browser import Console, console_session, own_broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """This module's own broker (the session one is shared with tests that count users)."""
    yield from own_broker(tmp_path_factory)


@pytest.fixture(scope="module")
def ui(broker) -> Iterator[Console]:
    yield from console_session(broker.api_url)


@pytest.fixture
def channel(broker) -> Iterator[pika.adapters.blocking_connection.BlockingChannel]:
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", broker.port, "/", pika.PlainCredentials("guest", "guest")))
    yield conn.channel()
    if conn.is_open:
        conn.close()


@pytest.fixture(autouse=True)
def no_js_errors(ui: Console) -> Iterator[None]:
    ui.js_errors()  # what earlier tests left
    yield
    assert ui.js_errors() == []
