"""/api/overview by tag, and ``?columns=`` on it, compared with RabbitMQ 3.10.8.

Observed on RabbitMQ 3.10.8 with users allowed in one vhost (``A``) of two: a user
tagged ``management`` or ``policymaker`` sees the queue totals, message_stats and
exchange/queue counts of ``A`` only, its own connections and channels, no
``consumers`` count and no ``node``/``listeners``/``contexts``; a ``monitoring`` user
(like an administrator) sees the whole broker. ``?columns=`` on the overview keeps
whole top-level fields. ``management_ui/overview.py``'s ``overview`` has the rules.

Runs against a private Leveret always, and against RabbitMQ when its API answers on
127.0.0.1:15672 (skipped otherwise); what it creates there is deleted afterwards. The
RabbitMQ node may be shared, so broker-wide figures are compared loosely and the
per-vhost ones exactly.
"""

from __future__ import annotations

import time
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from tests.integration import test_management_permissions as mp
from tests.integration.conftest import HttpApi

SUFFIX = uuid.uuid4().hex[:6]
A, B = f"ov-a-{SUFFIX}", f"ov-b-{SUFFIX}"  # the users may use A; B is guest's only
QA, QB = "qa", "qb"
USERS = {tag: f"ov-{tag}-{SUFFIX}" for tag in ("management", "policymaker", "monitoring")}
PW = "pw"
ALL = {"configure": ".*", "write": ".*", "read": ".*"}
DEFAULT_EXCHANGES = 7  # "", amq.direct, amq.fanout, amq.headers, amq.match, amq.topic,
# amq.rabbitmq.trace
MONITOR_ONLY = {"node", "listeners", "contexts"}


def _publish(api: HttpApi, vhost: str, queue: str, n: int) -> None:
    for _ in range(n):
        status, _, body = api.post(f"/exchanges/{vhost}/amq.default/publish",
                                   mp.publish_body(queue))
        assert (status, body) == (200, {"routed": True})


@pytest.fixture(params=["leveret", "rabbitmq"])
def target(request: pytest.FixtureRequest) -> Iterator[tuple[HttpApi, int]]:
    """(guest's API, the AMQP port) with A (QA: 2 messages) and B (QB: 3 messages), and a
    user of each tag allowed in A only."""
    if request.param == "rabbitmq":
        found = mp._rabbitmq_api()
        if found is None:
            pytest.skip("no RabbitMQ management API on 127.0.0.1:15672")
        api, port = found, 5672
    else:
        b = request.getfixturevalue("make_broker")()
        api, port = HttpApi(b.api_url + "/api"), b.port
    try:
        for vhost in (A, B):
            mp._ok(api.put(f"/vhosts/{vhost}", {}), 201, 204)
            mp._ok(api.put(f"/permissions/{vhost}/guest", ALL), 201, 204)
        for tag, name in USERS.items():
            mp._ok(api.put(f"/users/{name}", {"password": PW, "tags": tag}), 201, 204)
            mp._ok(api.put(f"/permissions/{A}/{name}", ALL), 201, 204)
        mp._ok(api.put(f"/queues/{A}/{QA}", {}), 201, 204)
        mp._ok(api.put(f"/queues/{B}/{QB}", {}), 201, 204)
        _publish(api, A, QA, 2)
        _publish(api, B, QB, 3)
        yield api, port
    finally:
        for name in USERS.values():
            api.delete(f"/users/{name}")
        for vhost in (A, B):
            api.delete(f"/vhosts/{vhost}")


def _connect(port: int, vhost: str, user: str, password: str,
             channels: int) -> pika.BlockingConnection:
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", port, vhost, pika.PlainCredentials(user, password)))
    for _ in range(channels):
        conn.channel()
    return conn


def _overview(api: HttpApi, query: str = "") -> dict[str, Any]:
    body: dict[str, Any] = api.ok("/overview" + query)
    return body


def _wait(conns: list[pika.BlockingConnection], done: Any, timeout: float = 60.0) -> Any:
    """Poll until ``done()`` answers something true (RabbitMQ's figures lag by up to its
    5 s statistics interval)."""
    deadline = time.monotonic() + timeout
    while True:
        found = done()
        if found or time.monotonic() > deadline:
            return found
        for conn in conns:
            conn.process_data_events(0.1)


def test_overview_shows_non_monitors_their_vhosts_only(target: tuple[HttpApi, int]) -> None:
    api, port = target
    mgmt = HttpApi(api.base, USERS["management"], PW)
    conns = [_connect(port, A, USERS["management"], PW, 1),
             _connect(port, A, "guest", "guest", 2)]  # guest's: not the user's own
    try:
        def settled() -> dict[str, Any] | None:
            seen = _overview(mgmt)
            totals = seen["object_totals"]
            return seen if (totals["connections"], totals["channels"],
                            seen["queue_totals"].get("messages"),
                            seen["message_stats"].get("publish")) == (1, 1, 2, 2) else None

        seen = _wait(conns, settled)
        if seen is None:  # say which of the four figures never settled
            last = _overview(mgmt)
            raise AssertionError((last["object_totals"], last["queue_totals"].get("messages"),
                                  last["message_stats"].get("publish")))
        for tag in ("management", "policymaker"):
            user = HttpApi(api.base, USERS[tag], PW)
            seen = _overview(user)
            assert not MONITOR_ONLY & seen.keys(), (tag, sorted(seen))
            assert {"churn_rates", "statistics_db_event_queue", "rabbitmq_version",
                    "exchange_types"} <= seen.keys(), (tag, sorted(seen))
            own = 1 if tag == "management" else 0  # its own connection (one channel)
            assert seen["object_totals"] == {"channels": own, "connections": own,
                                             "exchanges": DEFAULT_EXCHANGES, "queues": 1}, tag
            queue_totals = {k: v for k, v in seen["queue_totals"].items()
                            if not k.endswith("_details")}
            assert queue_totals == {"messages": 2, "messages_ready": 2,
                                    "messages_unacknowledged": 0}, tag
            assert seen["message_stats"]["publish"] == 2, tag  # A's 2, not B's 3
            assert "rate" in seen["queue_totals"]["messages_details"], tag
        monitor = _overview(HttpApi(api.base, USERS["monitoring"], PW))
        everything = _overview(api)
        assert monitor.keys() >= MONITOR_ONLY and everything.keys() >= MONITOR_ONLY
        for seen in (monitor, everything):  # the whole broker: at least A's and B's
            totals = seen["object_totals"]
            assert "consumers" in totals
            assert totals["connections"] >= 2 and totals["channels"] >= 3
            assert totals["queues"] >= 2 and totals["exchanges"] >= 2 * DEFAULT_EXCHANGES
            assert seen["queue_totals"]["messages"] >= 5
            assert seen["message_stats"]["publish"] >= 5
    finally:
        for conn in conns:
            if conn.is_open:
                conn.close()


def test_overview_of_a_user_with_no_vhost(target: tuple[HttpApi, int]) -> None:
    """A management user allowed nowhere: zero counts and empty totals (RabbitMQ 3.10.8
    answers ``{}`` for queue_totals and message_stats), not an error."""
    api, _ = target
    name = USERS["management"]
    mp._ok(api.delete(f"/permissions/{A}/{name}"), 204)
    seen = _overview(HttpApi(api.base, name, PW))
    assert seen["object_totals"] == {"channels": 0, "connections": 0, "exchanges": 0,
                                     "queues": 0}
    assert (seen["queue_totals"], seen["message_stats"]) == ({}, {})


def test_overview_columns_keep_top_level_fields(target: tuple[HttpApi, int]) -> None:
    api, _ = target
    query = "?" + urllib.parse.urlencode(
        {"columns": "object_totals.queues,cluster_name,queue_totals.messages.x,nope,nope.x"})
    seen = _overview(api, query)
    assert set(seen) == {"object_totals", "cluster_name", "queue_totals"}
    assert set(seen["object_totals"]) == {"channels", "connections", "consumers",
                                          "exchanges", "queues"}
    assert {"messages", "messages_ready", "messages_details"} <= set(seen["queue_totals"])
    mgmt = HttpApi(api.base, USERS["management"], PW)
    seen = _overview(mgmt, "?columns=object_totals,node,rabbitmq_version")
    assert set(seen) == {"object_totals", "rabbitmq_version"}  # node: monitors only
    assert seen["object_totals"]["queues"] == 1
