"""Delayed exchanges as their users meet them: the plugin's contract over pika and aio-pika,
LavinMQ's argument, the HTTP API and Prometheus series, and kill -9 while scheduling and
while releasing (every message delivered once, none before it was due).

"Not early" is checked against the publisher's own clock: the broker computes the due time
after the publish left the client, so a message may never arrive before
``sent + x-delay``. Nothing here asserts how late it may be (that is ``bench/delayed.py``'s).
"""

from __future__ import annotations

import asyncio
import decimal
import time
from typing import Any

import aio_pika
import pika
import pika.exceptions
import pytest

from tests.integration.conftest import WAIT, HttpApi

X = "/exchanges/%2F/"
PERSISTENT = 2


def _declare(ch: Any, name: str, queue: str, routing_type: str = "direct", key: str = "k",
             durable: bool = True) -> None:
    ch.exchange_declare(name, "x-delayed-message", durable=durable,
                        arguments={"x-delayed-type": routing_type})
    ch.queue_declare(queue, durable=True)
    ch.queue_bind(queue, name, key)


def _props(delay: object, **kw: Any) -> pika.BasicProperties:
    return pika.BasicProperties(headers={"x-delay": delay}, delivery_mode=PERSISTENT, **kw)


def _consume(ch: Any, queue: str, count: int) -> list[tuple[bytes, float, Any]]:
    """(body, arrival time, headers) of the next ``count`` messages (generous deadline)."""
    got: list[tuple[bytes, float, Any]] = []
    deadline = time.time() + WAIT
    for method, props, body in ch.consume(queue, auto_ack=True, inactivity_timeout=1):
        if method is not None:
            got.append((body, time.time(), props.headers))
        if len(got) == count or time.time() > deadline:
            break
    ch.cancel()
    return got


def test_declaration_errors_are_the_plugins(broker, qname):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    for arguments, text in (
        ({}, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing "
             "exchange type"),
        ({"x-delayed-type": "x-delayed-message"},
         "PRECONDITION_FAILED - Invalid argument, 'x-delayed-message' can't be used for "
         "'x-delayed-type'"),
    ):
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            ch.exchange_declare(qname, "x-delayed-message", arguments=arguments)
        assert (refused.value.reply_code, refused.value.reply_text) == (406, text)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as unknown:
        conn.channel().exchange_declare(qname, "x-delayed-message",
                                        arguments={"x-delayed-type": "nope"})
    assert (unknown.value.reply_code, unknown.value.reply_text) == (
        503, "COMMAND_INVALID - unknown exchange type 'nope'")


def test_confirmed_delayed_messages_arrive_in_due_order_and_never_early(broker, qname):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    _declare(ch, qname, qname)
    sent = {}
    for delay in (1500, 500, 1000):
        sent[delay] = time.time()
        ch.basic_publish(qname, "k", str(delay).encode(), _props(delay))  # waits for its ack
    assert ch.basic_get(qname)[0] is None  # confirmed, and not released yet
    got = _consume(ch, qname, 3)
    assert [body for body, _, _ in got] == [b"500", b"1000", b"1500"]
    for body, arrived, headers in got:
        delay = int(body)
        assert arrived >= sent[delay] + delay / 1000
        assert headers == {"x-delay": -delay}  # the plugin's rewrite
    conn.close()


def test_what_is_not_a_positive_delay_is_routed_at_once(broker, qname):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    _declare(ch, qname, qname)
    ch.basic_publish(qname, "k", b"none", pika.BasicProperties(delivery_mode=PERSISTENT))
    for delay in (0, -5, "soon", "0"):
        ch.basic_publish(qname, "k", repr(delay).encode(), _props(delay))
    bodies = [body for body, _, _ in _consume(ch, qname, 5)]
    assert bodies == [b"none", b"0", b"-5", b"'soon'", b"'0'"]
    conn.close()


def test_strings_floats_and_delays_past_2_to_the_32_are_delayed(broker, api, qname):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    _declare(ch, qname, qname)
    start = time.time()
    ch.basic_publish(qname, "k", b"text", _props("700"))
    ch.basic_publish(qname, "k", b"float", _props(decimal.Decimal("700.9")))  # pika: no float
    ch.basic_publish(qname, "k", b"far", _props(2**32))  # the plugin delivers this at once
    assert api.ok(X + qname)["messages_delayed"] == 3
    got = _consume(ch, qname, 2)
    assert sorted(body for body, _, _ in got) == [b"float", b"text"]
    assert all(arrived >= start + 0.7 for _, arrived, _ in got)
    assert api.ok(X + qname)["messages_delayed"] == 1
    assert ch.basic_get(qname)[0] is None
    conn.close()


def test_mandatory_is_judged_against_the_bindings_at_publish_time(broker, qname):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    _declare(ch, qname, qname)
    ch.basic_publish(qname, "k", b"bound", _props(200), mandatory=True)  # no basic.return
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish(qname, "nobody", b"unbound", _props(200), mandatory=True)
    assert [body for body, _, _ in _consume(ch, qname, 1)] == [b"bound"]
    conn.close()


def test_release_routes_through_the_bindings_of_release_time(broker, qname):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    _declare(ch, qname, qname)
    ch.basic_publish(qname, "later", b"m", _props(600))  # nothing bound to "later" yet
    ch.queue_bind(qname, qname, "later")
    assert [body for body, _, _ in _consume(ch, qname, 1)] == [b"m"]
    conn.close()


def test_dead_lettering_into_a_delayed_exchange_delays(broker, qname):
    """A retry queue's rejects go to a delayed exchange: delayed by their x-delay, as the
    plugin delays whatever reaches its exchange; once released (x-delay negative) a
    second dead-lettering routes at once."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    _declare(ch, qname, qname)
    work = qname + "-work"
    ch.queue_declare(work, durable=True, arguments={"x-dead-letter-exchange": qname,
                                                     "x-dead-letter-routing-key": "k"})
    sent = time.time()
    ch.basic_publish("", work, b"retry me", _props(700))
    method, _, _ = ch.basic_get(work)
    ch.basic_reject(method.delivery_tag, requeue=False)
    assert ch.basic_get(qname)[0] is None
    (body, arrived, headers), = _consume(ch, qname, 1)
    assert body == b"retry me" and arrived >= sent + 0.7
    assert headers["x-delay"] == -700 and headers["x-death"][0]["queue"] == work
    conn.close()


def test_lavinmq_style_delayed_topic_exchange(broker, qname):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare(qname, "topic", durable=True, arguments={"x-delayed-exchange": True})
    ch.queue_declare(qname, durable=True)
    ch.queue_bind(qname, qname, "a.#")
    sent = time.time()
    ch.basic_publish(qname, "a.b", b"m", _props(500))
    assert ch.basic_get(qname)[0] is None
    (body, arrived, headers), = _consume(ch, qname, 1)
    assert (body, headers) == (b"m", {"x-delay": -500}) and arrived >= sent + 0.5
    conn.close()


async def test_aio_pika_topic_delayed_exchange(broker, qname):
    conn = await aio_pika.connect(broker.url)
    ch = await conn.channel()
    exchange = await ch.declare_exchange(qname, "x-delayed-message", durable=True,
                                         arguments={"x-delayed-type": "topic"})
    queue = await ch.declare_queue(qname, durable=True)
    await queue.bind(exchange, "t.*")
    sent = time.time()
    await exchange.publish(aio_pika.Message(b"x", headers={"x-delay": 1000}), "t.one")
    assert await queue.get(fail=False) is None
    async with queue.iterator() as messages:
        async for message in messages:
            arrived = time.time()
            await message.ack()
            break
    assert message.body == b"x" and message.headers == {"x-delay": -1000}
    assert arrived >= sent + 1.0
    await conn.close()


def test_http_api_lists_cancels_and_releases(broker, api: HttpApi, qname):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    _declare(ch, qname, qname)
    for i, delay in enumerate((60_000, 30_000, 90_000, 120_000)):
        ch.basic_publish(qname, "k", b"m%d" % i, _props(delay))
    status, _, listed = api.get(f"/exchanges/%2F/{qname}/delayed")
    assert status == 200 and listed["messages_delayed"] == 4 and listed["may_configure"]
    assert [m["payload"] for m in listed["messages"]] == ["m1", "m0", "m2", "m3"]
    assert listed["messages"][0]["properties"]["headers"] == {"x-delay": 30_000}
    assert [m["due"] for m in listed["messages"]] == sorted(m["due"] for m in listed["messages"])
    first, second = listed["messages"][0]["id"], listed["messages"][1]["id"]
    page = api.ok(X + qname + "/delayed?count=2&after=" + second)["messages"]
    assert [m["payload"] for m in page] == ["m2", "m3"]
    assert api.delete(f"/exchanges/%2F/{qname}/delayed/{first}")[0] == 204
    assert api.delete(f"/exchanges/%2F/{qname}/delayed/{first}")[0] == 404
    assert api.post(f"/exchanges/%2F/{qname}/delayed/{second}/release")[0] == 204
    _, _, body = ch.basic_get(qname, auto_ack=True)
    assert body == b"m0"
    assert api.ok(X + qname)["messages_delayed"] == 2
    metrics = _metrics(broker)
    assert (f'leveret_exchange_messages_delayed{{vhost="/",exchange="{qname}"}} 2'
            in metrics)
    released = [line for line in metrics.splitlines()
                if line.startswith("leveret_delayed_release_lateness_seconds_count ")]
    assert released and int(released[0].split()[1]) >= 1  # the release-now above
    assert api.delete(f"/exchanges/%2F/{qname}/delayed")[0] == 204
    assert api.ok(X + qname)["messages_delayed"] == 0
    assert api.get(f"/exchanges/%2F/{qname}/delayed")[2]["messages"] == []
    assert api.get(X + "amq.direct/delayed")[0] == 404
    conn.close()


def test_the_schedule_routes_need_read_or_configure_on_the_exchange(broker, api, qname):
    user = qname + "-user"
    assert api.put(f"/users/{user}", {"password": "pw", "tags": "management"})[0] in (201, 204)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    _declare(ch, qname, qname)
    ch.basic_publish(qname, "k", b"m", _props(60_000))
    conn.close()
    as_user = HttpApi(broker.api_url + "/api", user, "pw")
    for configure, read, listing, cancel in ((".*", "^$", 401, 204), ("^$", ".*", 200, 401)):
        assert api.put(f"/permissions/%2F/{user}", {"configure": configure, "write": ".*",
                                                     "read": read})[0] in (201, 204)
        status, _, body = as_user.get(f"/exchanges/%2F/{qname}/delayed")
        assert status == listing
        if status == 200:
            assert body["may_configure"] is False  # the console offers no actions
        assert as_user.delete(f"/exchanges/%2F/{qname}/delayed")[0] == cancel
    assert api.delete(f"/users/{user}")[0] == 204


def _metrics(broker: Any) -> str:
    import urllib.request
    with urllib.request.urlopen(broker.metrics_url + "/metrics", timeout=WAIT) as answer:
        return answer.read().decode()


def test_over_http_declare_publish_and_import(broker, api: HttpApi, qname):
    for arguments, reason in (
        ({}, "Invalid argument, 'x-delayed-type' must be an existing exchange type"),
        ({"x-delayed-type": "nope"}, "unknown exchange type 'nope'"),
    ):
        status, _, body = api.put(X + qname, {"type": "x-delayed-message",
                                              "arguments": arguments})
        assert (status, body["reason"]) == (400, reason)
    assert api.put(X + qname, {"type": "x-delayed-message", "durable": True,
                               "arguments": {"x-delayed-type": "fanout"}})[0] == 201
    assert api.put("/queues/%2F/" + qname, {"durable": True})[0] == 201
    assert api.post(f"/bindings/%2F/e/{qname}/q/{qname}", {"routing_key": ""})[0] == 201
    status, _, body = api.post(X + qname + "/publish", {
        "routing_key": "any", "payload": "x", "payload_encoding": "string",
        "properties": {"headers": {"x-delay": 60_000}}})
    assert (status, body) == (200, {"routed": True})
    assert api.ok(X + qname)["messages_delayed"] == 1
    assert api.ok("/queues/%2F/" + qname)["messages"] == 0
    defs = {"exchanges": [{"name": qname + "-bad", "vhost": "/", "type": "x-delayed-message",
                           "durable": True, "arguments": {}}]}
    status, _, body = api.post("/definitions", defs)
    assert status == 400 and "'x-delayed-type' must be an existing exchange type" in (
        body["reason"])
    defs["exchanges"][0]["arguments"] = {"x-delayed-type": "topic"}
    assert api.post("/definitions", defs)[0] in (200, 201, 204)
    assert api.ok(X + qname + "-bad")["messages_delayed"] == 0


def test_deleting_the_exchange_drops_its_schedule(broker, api, qname):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    _declare(ch, qname, qname)
    ch.basic_publish(qname, "k", b"m", _props(300))
    ch.exchange_delete(qname)
    _declare(ch, qname, qname)  # a namesake: the old schedule is not its
    assert api.ok(X + qname)["messages_delayed"] == 0
    time.sleep(0.6)  # past the old due time: nothing may arrive (a wait for an absence)
    assert ch.basic_get(qname)[0] is None
    conn.close()


# -- kill -9 --------------------------------------------------------------------------------

async def _publish_many(url: str, exchange: str, queue: str, count: int, delay: int
                        ) -> dict[bytes, float]:
    """Publish ``count`` confirmed persistent messages; body -> earliest allowed arrival."""
    conn = await aio_pika.connect(url)
    ch = await conn.channel(publisher_confirms=True)
    ex = await ch.declare_exchange(exchange, "x-delayed-message", durable=True,
                                   arguments={"x-delayed-type": "direct"})
    q = await ch.declare_queue(queue, durable=True)
    await q.bind(ex, "k")
    due: dict[bytes, float] = {}
    for start in range(0, count, 500):
        batch = []
        for i in range(start, min(count, start + 500)):
            body = b"%d" % i
            due[body] = time.time() + delay / 1000
            batch.append(ex.publish(aio_pika.Message(
                body, headers={"x-delay": delay}, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                "k"))
        await asyncio.gather(*batch)  # every confirm: each one is on disk
    await conn.close()
    return due


async def _drain(url: str, queue: str, count: int) -> list[tuple[bytes, float]]:
    conn = await aio_pika.connect(url)
    ch = await conn.channel()
    await ch.set_qos(1000)
    q = await ch.declare_queue(queue, durable=True)
    got: list[tuple[bytes, float]] = []
    deadline = time.time() + WAIT
    # A consumer feeding a local queue, not q.iterator(): aio-pika closes an iterator whose
    # __anext__ is cancelled, so a wait that timed out before the first message was due
    # (a restart quicker than the delay) would end the drain.
    inbox: asyncio.Queue[Any] = asyncio.Queue()
    tag = await q.consume(inbox.put)
    while len(got) < count and time.time() < deadline:
        try:
            message = await asyncio.wait_for(inbox.get(), 1)
        except TimeoutError:
            continue
        got.append((message.body, time.time()))
        await message.ack()
    await q.cancel(tag)
    await asyncio.sleep(0.3)  # a duplicate would be right behind (a wait for an absence)
    extra = await q.get(fail=False)
    if extra is not None:
        got.append((extra.body, time.time()))
    await conn.close()
    return got


def _check_once_and_not_early(due: dict[bytes, float], got: list[tuple[bytes, float]]) -> None:
    bodies = [body for body, _ in got]
    assert len(bodies) == len(set(bodies)), "a message was delivered twice"
    assert set(bodies) == set(due), f"{len(set(due) - set(bodies))} messages lost"
    early = [body for body, arrived in got if arrived < due[body]]
    assert not early, f"{len(early)} released early"


async def test_kill_9_while_scheduling_loses_nothing_and_releases_nothing_early(make_broker,
                                                                               qname):
    b = make_broker()
    due = await _publish_many(b.url, qname, qname, 3000, 2500)
    b.stop(kill=True)  # well before anything is due
    b.start()
    got = await _drain(b.url, qname, len(due))
    _check_once_and_not_early(due, got)


async def test_kill_9_while_releasing_delivers_each_once(make_broker, qname):
    # Released at 200 a second (500 at a time), so the kill lands in the middle of the
    # release unless this test is not run for over 12 s; restarted at the default rate.
    b = make_broker(None, LEVERET_DELAYED_RELEASE_RATE="200")
    due = await _publish_many(b.url, qname, qname, 3000, 300)
    deadline = time.time() + WAIT
    conn = await aio_pika.connect(b.url)
    ch = await conn.channel()
    q = await ch.declare_queue(qname, durable=True)
    while q.declaration_result.message_count < 500 and time.time() < deadline:
        await asyncio.sleep(0.05)
        q = await ch.declare_queue(qname, durable=True)
    released = q.declaration_result.message_count
    await conn.close()
    b.stop(kill=True)
    assert 0 < released < 3000, "the kill should land mid-release"
    del b.env["LEVERET_DELAYED_RELEASE_RATE"]
    b.start()  # what was overdue meanwhile is released after the restart
    got = await _drain(b.url, qname, len(due))
    _check_once_and_not_early(due, got)
