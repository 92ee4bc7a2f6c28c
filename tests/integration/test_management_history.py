"""Chart history from the broker: ``?lengths_age``/``msg_rates_age``/``data_rates_age``
give every queue, exchange, connection and channel RabbitMQ's ``X_details.samples``,
so a chart (the console's, or any API client's) draws history as soon as it loads.

The broker samples every 0.5 s here (``collect_statistics_interval``), so a few rounds
come quickly; the tests wait for the state they need, never for a time.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from tests.conftest import BrokerProcess

from .conftest import WAIT, HttpApi

pytestmark = pytest.mark.timeout(120)

RANGES = "lengths_age=60&lengths_incr=1&msg_rates_age=60&msg_rates_incr=1" \
         "&data_rates_age=60&data_rates_incr=1"


@pytest.fixture(scope="module")
def fast(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("history")
    b = BrokerProcess(base / "data", base / "broker.log",
                      env={"LEVERET_COLLECT_STATISTICS_INTERVAL": "0.5"}).start()
    yield b
    assert b.stop() == 0, b.log_text()[-4000:]
    assert "Traceback" not in b.log_text(), b.log_text()[-4000:]


@pytest.fixture(scope="module")
def http(fast: BrokerProcess) -> HttpApi:
    return HttpApi(fast.api_url + "/api")


def until(fetch: Any, holds: Any) -> Any:
    deadline = time.monotonic() + WAIT
    while True:
        value = fetch()
        if holds(value):
            return value
        assert time.monotonic() < deadline, value
        time.sleep(0.1)


def samples(details: dict[str, Any]) -> list[int]:
    return [s["sample"] for s in details.get("samples", [])]


def test_queue_exchange_connection_and_channel_history(fast: BrokerProcess, http: HttpApi
                                                       ) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", fast.port, client_properties={"connection_name": "history-app"}))
    try:
        ch = conn.channel()
        ch.exchange_declare("hist.x", "topic")
        ch.queue_declare("hist.q")
        ch.queue_bind("hist.q", "hist.x", "a.#")
        for _ in range(20):
            ch.basic_publish("hist.x", "a.b", b"0123456789")
        q = until(lambda: http.ok(f"/queues/%2F/hist.q?{RANGES}"),
                  lambda q: samples(q["messages_details"])[0] == 20)
        # Newest first, millisecond timestamps, RabbitMQ's four keys.
        d = q["messages_details"]
        assert set(d) == {"rate", "samples", "avg_rate", "avg"}
        stamps = [s["timestamp"] for s in d["samples"]]
        assert stamps == sorted(stamps, reverse=True) and stamps[0] > 1e12
        assert samples(q["messages_ready_details"])[0] == 20
        assert samples(q["message_stats"]["publish_details"])[0] == 20
        assert q["message_stats"]["publish"] == 20
        # Without a range: the rate alone, as RabbitMQ.
        assert set(http.ok("/queues/%2F/hist.q")["messages_details"]) == {"rate"}
        # The exchange: what the channel published into it, and routed on.
        x = until(lambda: http.ok(f"/exchanges/%2F/hist.x?{RANGES}"),
                  lambda x: samples(x.get("message_stats", {}).get("publish_in_details", {}))[:1]
                  == [20])
        assert x["message_stats"]["publish_in"] == 20 and x["message_stats"]["publish_out"] == 20
        listed = {e["name"]: e for e in http.ok("/exchanges/%2F")}
        assert listed["hist.x"]["message_stats"]["publish_in"] == 20
        # The connection's octets, under the name the client gave it.
        name = next(c["name"] for c in http.ok("/connections")
                    if c.get("user_provided_name") == "history-app")
        path = "/connections/" + urllib.parse.quote(name, safe="")
        c = until(lambda: http.ok(f"{path}?{RANGES}"),
                  lambda c: samples(c["recv_oct_details"])[0] > 0)
        assert samples(c["recv_oct_details"])[0] >= 20 * 10
        chan = until(lambda: http.ok(f"{path}/channels?{RANGES}")[0],
                     lambda c: samples(c["message_stats"]["publish_details"])[:1] == [20])
        assert chan["message_stats"]["publish"] == 20
    finally:
        conn.close()


def test_history_shape_matches_rabbitmq(http: HttpApi, rabbitmq_http: HttpApi) -> None:
    """The same ranges asked of RabbitMQ 3.10 and of Leveret: the same keys."""
    for target in (http, rabbitmq_http):
        target.put("/queues/%2F/hist-shape")
    try:
        ours = http.ok(f"/queues/%2F/hist-shape?{RANGES}")["messages_details"]
        theirs = until(lambda: rabbitmq_http.ok(f"/queues/%2F/hist-shape?{RANGES}"),
                       lambda q: "messages_details" in q)["messages_details"]
        assert set(ours) == set(theirs)
        # One point a second over the minute, both ends included, on whole seconds.
        assert len(ours["samples"]) == len(theirs["samples"]) == 61
        assert all(s["timestamp"] % 1000 == 0 for s in ours["samples"])
    finally:
        for target in (http, rabbitmq_http):
            target.delete("/queues/%2F/hist-shape")


def test_a_users_overview_history_is_summed_over_its_vhosts(http: HttpApi) -> None:
    """A management user's overview sums its vhosts' rings: samples too, not only rates."""
    mine, other, user = "hist-mine", "hist-other", "hist-user"
    for vhost in (mine, other):
        assert http.put(f"/vhosts/{vhost}")[0] in (201, 204)
        assert http.put(f"/permissions/{vhost}/guest", {"configure": ".*", "write": ".*",
                                                        "read": ".*"})[0] in (201, 204)
        assert http.put(f"/queues/{vhost}/q")[0] in (201, 204)
    assert http.put(f"/users/{user}", {"password": "pw", "tags": "management"})[0] in (201, 204)
    assert http.put(f"/permissions/{mine}/{user}", {"configure": ".*", "write": ".*",
                                                    "read": ".*"})[0] in (201, 204)
    try:
        for vhost, n in ((mine, 4), (other, 3)):
            for _ in range(n):
                status, _, out = http.post(f"/exchanges/{vhost}/amq.default/publish", {
                    "routing_key": "q", "payload": "x", "payload_encoding": "string",
                    "properties": {}})
                assert status == 200 and out["routed"], out
        seen = HttpApi(http.base, user, "pw")
        totals = until(lambda: seen.ok(f"/overview?{RANGES}")["queue_totals"],
                       lambda t: samples(t["messages_details"])[:1] == [4])
        assert samples(totals["messages_ready_details"])[0] == 4  # not the other vhost's 3
        assert set(totals["messages_details"]) == {"rate", "samples", "avg_rate", "avg"}
    finally:
        http.delete(f"/users/{user}")
        for vhost in (mine, other):
            http.delete(f"/vhosts/{vhost}")


def test_http_publishes_count_in_the_exchanges_stats(http: HttpApi) -> None:
    assert http.put("/exchanges/%2F/hist.http", {"type": "fanout"})[0] in (201, 204)
    assert http.put("/queues/%2F/hist.http.q")[0] in (201, 204)
    assert http.post("/bindings/%2F/e/hist.http/q/hist.http.q", {})[0] == 201
    try:
        for _ in range(3):
            assert http.post("/exchanges/%2F/hist.http/publish", {
                "routing_key": "", "payload": "x", "payload_encoding": "string",
                "properties": {}})[2] == {"routed": True}
        stats = until(lambda: http.ok("/exchanges/%2F/hist.http").get("message_stats", {}),
                      lambda m: m.get("publish_in") == 3)
        assert stats["publish_out"] == 3
    finally:
        http.delete("/exchanges/%2F/hist.http")
        http.delete("/queues/%2F/hist.http.q")
