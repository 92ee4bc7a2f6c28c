"""Queue features through real clients: TTL, x-expires, dead-lettering, length limits,
priorities, delivery limit, single active consumer.

Tests taking the ``target`` fixture run against Leveret and, when one answers on
127.0.0.1:5672, against a real RabbitMQ too (skipped otherwise): the expectation is
then proven on RabbitMQ itself. TTLs are 50-200 ms; waits poll instead of sleeping.
Nothing assumes how fast the machine is: a test sleeps only to let a TTL pass (time
cannot run slower than the sleep), waits for what must happen, and a message that must
not expire yet has a TTL far longer than any test, or is checked against measured time.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import time
import uuid
from typing import Any

import pika
import pytest

PERSISTENT = pika.BasicProperties(delivery_mode=2)




@pytest.fixture
def names() -> Any:
    """Unique names; queues/exchanges are declared auto-delete or deleted by the test."""
    base = f"qf-{uuid.uuid4().hex[:10]}"
    return lambda suffix: f"{base}.{suffix}"


# An upper bound for a state that is due now, not a budget: a wait ends when it holds.
WAIT = 60.0


def wait_for(conn: pika.BlockingConnection, done: Any, timeout: float = WAIT) -> bool:
    """Pump ``conn`` until ``done()`` holds (once is enough: it is not asked again)."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        conn.process_data_events(time_limit=0.01)
    return True


def ready(ch: Any, queue: str) -> int:
    return ch.queue_declare(queue, passive=True).method.message_count


def get_bodies(ch: Any, queue: str) -> list[bytes]:
    out = []
    while True:
        method, _, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append(body)


def dlx_setup(ch: Any, names: Any) -> tuple[str, str]:
    """A fanout DLX bound to a plain queue collecting dead letters."""
    dlx, dlq = names("dlx"), names("dlq")
    ch.exchange_declare(dlx, "fanout", auto_delete=True)
    ch.queue_declare(dlq, exclusive=True)
    ch.queue_bind(dlq, dlx)
    return dlx, dlq


# -- TTL ---------------------------------------------------------------------------


def test_message_ttl_expires_without_consumers(target, names):
    conn = target.connect()
    ch = conn.channel()
    q = names("q")
    ch.confirm_delivery()  # RabbitMQ: a passive declare's count can overtake a publish
    ch.queue_declare(q, exclusive=True, arguments={"x-message-ttl": 100})
    published = time.monotonic()
    ch.basic_publish("", q, b"old")
    ch.basic_publish("", q, b"short", pika.BasicProperties(expiration="50"))
    count = ready(ch, q)
    if target.name == "leveret" and time.monotonic() - published < 0.1:
        # Asked within the head's TTL. (RabbitMQ in this sandbox sometimes expires a 100 ms
        # message at once.)
        assert count == 2
    # Dropped by the head timer, not only when read (a passive declare reads nothing).
    assert wait_for(conn, lambda: ready(ch, q) == 0)
    ch.basic_publish("", q, b"new")
    assert get_bodies(ch, q) == [b"new"]


def test_per_message_expiration_is_lazy_behind_the_head(target, names):
    conn = target.connect()
    ch = conn.channel()
    q = names("q")
    ch.queue_declare(q, exclusive=True)
    ch.basic_publish("", q, b"long", pika.BasicProperties(expiration="600000"))
    ch.basic_publish("", q, b"short", pika.BasicProperties(expiration="50"))
    time.sleep(0.15)
    # The expired message behind a live head still counts (RabbitMQ classic queues)...
    assert ready(ch, q) == 2
    # ...but is never delivered.
    assert get_bodies(ch, q) == [b"long"]
    assert ready(ch, q) == 0


def test_effective_ttl_is_the_minimum(target, names):
    conn = target.connect()
    ch = conn.channel()
    q = names("q")
    ch.queue_declare(q, exclusive=True, arguments={"x-message-ttl": 60_000})
    ch.basic_publish("", q, b"a", pika.BasicProperties(expiration="50"))
    ch.basic_publish("", q, b"b")
    time.sleep(0.15)
    assert get_bodies(ch, q) == [b"b"]


def test_ttl_zero_delivers_only_to_a_ready_consumer(target, names):
    conn = target.connect()
    ch = conn.channel()
    q = names("q")
    ch.queue_declare(q, exclusive=True, arguments={"x-message-ttl": 0})
    ch.basic_publish("", q, b"nobody")
    got: list[bytes] = []
    ch.basic_consume(q, lambda c, m, p, body: got.append(body), auto_ack=True)
    ch.basic_publish("", q, b"somebody")
    assert wait_for(conn, lambda: got)
    conn.process_data_events(time_limit=0.1)
    assert got == [b"somebody"]


def test_requeued_message_keeps_its_expiry(target, names):
    conn = target.connect()
    ch = conn.channel()
    q = names("q")
    ttl = 0.15
    while True:  # got before it expired: on a busy machine a publish and get can take longer
        ch.queue_declare(q, exclusive=True, arguments={"x-message-ttl": int(ttl * 1000)})
        ch.basic_publish("", q, b"m")
        method, _, _ = ch.basic_get(q, auto_ack=False)
        if method is not None:
            break
        ch.queue_delete(q)
        ttl *= 4
    time.sleep(ttl + 0.05)
    ch.basic_nack(method.delivery_tag, requeue=True)
    conn.process_data_events(time_limit=0.05)
    assert ch.basic_get(q, auto_ack=True)[0] is None


def test_invalid_expiration_closes_the_channel(target, names):
    conn = target.connect()
    ch = conn.channel()
    q = names("q")
    ch.queue_declare(q, exclusive=True)
    ch.basic_publish("", q, b"x", pika.BasicProperties(expiration="soon"))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.queue_declare(q, passive=True)
    assert err.value.reply_code == 406
    assert err.value.reply_text == "PRECONDITION_FAILED - invalid expiration 'soon': no_integer"


def test_x_expires_deletes_an_unused_queue(target, names):
    keeper = target.connect()  # holds the dead-letter queue for the whole test
    kch = keeper.channel()
    dlx, dlq = dlx_setup(kch, names)
    conn = target.connect()
    ch = conn.channel()
    q = names("q")
    args = {"x-expires": 150, "x-dead-letter-exchange": dlx}
    ch.queue_declare(q, arguments=args)
    ch.basic_publish("", q, b"m")
    renewed = [time.monotonic()]
    for _ in range(3):  # declares and gets renew the lease
        time.sleep(0.08)
        ch.queue_declare(q, arguments=args)
        renewed.append(time.monotonic())
    if max(b - a for a, b in itertools.pairwise(renewed)) < 0.15:
        # Every renewal came within the lease (measured: a busy machine can be slower).
        assert ready(ch, q) == 1
    ch.basic_consume(q, lambda *a: None, auto_ack=False)
    time.sleep(0.25)
    assert ready(ch, q) == 0  # a consumer keeps it alive (the message is unacked)
    conn.close()  # consumer gone: the message is requeued, and the lease runs

    def deleted() -> bool:
        # Polled with a bind, not a passive declare: a declare, passive too, renews the
        # lease (RabbitMQ's stat does), so polling with one could keep the queue alive.
        nonlocal kch
        try:
            kch.queue_bind(q, "amq.direct", routing_key=q)
        except pika.exceptions.ChannelClosedByBroker as err:
            assert err.reply_code == 404
            kch = keeper.channel()
            return True
        return False

    assert wait_for(keeper, deleted)
    assert kch.basic_get(dlq)[0] is None  # a deleted queue dead-letters nothing


# -- dead-lettering ----------------------------------------------------------------


def test_rejected_message_is_dead_lettered_with_x_death(target, names):
    conn = target.connect()
    ch = conn.channel()
    dlx, dlq = dlx_setup(ch, names)
    q = names("q")
    ch.queue_declare(q, exclusive=True, arguments={"x-dead-letter-exchange": dlx})
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    ch.basic_publish("", q, b"body", pika.BasicProperties(
        expiration="60000", content_type="text/plain", headers={"CC": ["cc-key"], "h": 1}))
    method, _, _ = ch.basic_get(q)
    ch.basic_reject(method.delivery_tag, requeue=False)
    assert wait_for(conn, lambda: ready(ch, dlq) == 1)
    method, props, body = ch.basic_get(dlq, auto_ack=True)
    assert body == b"body" and method.exchange == dlx and method.routing_key == q
    assert props.content_type == "text/plain"
    assert props.expiration is None  # moved to original-expiration
    headers = props.headers
    assert headers["h"] == 1 and headers["CC"] == ["cc-key"]
    (death,) = headers["x-death"]
    assert death["count"] == 1 and death["reason"] == "rejected" and death["queue"] == q
    assert death["exchange"] == "" and death["routing-keys"] == [q, "cc-key"]
    assert death["original-expiration"] == "60000"
    assert before <= death["time"] <= datetime.datetime.now(datetime.UTC)
    assert headers["x-first-death-queue"] == q
    assert headers["x-first-death-reason"] == "rejected"
    assert headers["x-first-death-exchange"] == ""


def test_x_death_counts_and_orders_newest_first(target, names):
    """q1 --rejected--> q2 (TTL) --expired--> q1 --rejected--> q2: counts grow, first stays."""
    conn = target.connect()
    ch = conn.channel()
    q1, q2 = names("q1"), names("q2")
    ch.queue_declare(q1, exclusive=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": q2})
    ch.queue_declare(q2, exclusive=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": q1, "x-message-ttl": 50})
    ch.basic_publish("", q1, b"m")
    for _round in range(2):
        assert wait_for(conn, lambda: ready(ch, q1) == 1)
        method, _, _ = ch.basic_get(q1)
        ch.basic_reject(method.delivery_tag, requeue=False)
    assert wait_for(conn, lambda: ready(ch, q1) == 1)
    _, props, _ = ch.basic_get(q1, auto_ack=True)
    deaths = props.headers["x-death"]
    assert [(d["queue"], d["reason"], d["count"]) for d in deaths] == [
        (q2, "expired", 2), (q1, "rejected", 2)]
    assert deaths[1]["routing-keys"] == [q1]  # the first death's details are kept
    assert props.headers["x-first-death-queue"] == q1
    assert props.headers["x-first-death-reason"] == "rejected"


def test_expiry_cycle_back_to_the_same_queue_is_dropped(target, names):
    conn = target.connect()
    ch = conn.channel()
    q = names("q")
    ch.confirm_delivery()  # RabbitMQ: a passive declare's count can overtake a publish
    ch.queue_declare(q, exclusive=True, arguments={
        "x-dead-letter-exchange": "", "x-message-ttl": 50})
    ch.basic_publish("", q, b"m")
    assert wait_for(conn, lambda: ready(ch, q) == 0)


def test_missing_dead_letter_exchange_drops_silently(target, names):
    conn = target.connect()
    ch = conn.channel()
    q = names("q")
    ch.queue_declare(q, exclusive=True, arguments={"x-dead-letter-exchange": names("none")})
    ch.basic_publish("", q, b"m")
    method, _, _ = ch.basic_get(q)
    ch.basic_reject(method.delivery_tag, requeue=False)
    assert ready(ch, q) == 0  # and the channel is still open


# -- length limits -------------------------------------------------------------------


def test_max_length_drop_head_dead_letters_maxlen(target, names):
    conn = target.connect()
    ch = conn.channel()
    dlx, dlq = dlx_setup(ch, names)
    q = names("q")
    ch.queue_declare(q, exclusive=True, arguments={"x-max-length": 2, "x-dead-letter-exchange": dlx})
    for i in range(4):
        ch.basic_publish("", q, b"m%d" % i)
    assert wait_for(conn, lambda: ready(ch, dlq) == 2)
    assert get_bodies(ch, q) == [b"m2", b"m3"]
    _, props, body = ch.basic_get(dlq, auto_ack=True)
    assert body == b"m0" and props.headers["x-death"][0]["reason"] == "maxlen"


def test_max_length_bytes_counts_body_bytes(target, names):
    conn = target.connect()
    ch = conn.channel()
    q = names("q")
    ch.queue_declare(q, exclusive=True, arguments={"x-max-length-bytes": 10})
    for body in (b"aaaa", b"bbbb", b"cccc"):
        ch.basic_publish("", q, body, pika.BasicProperties(headers={"pad": "x" * 100}))
    assert get_bodies(ch, q) == [b"bbbb", b"cccc"]


def test_unacked_messages_do_not_count(target, names):
    conn = target.connect()
    ch = conn.channel()
    q = names("q")
    ch.queue_declare(q, exclusive=True, arguments={"x-max-length": 1})
    ch.basic_publish("", q, b"a")
    ch.basic_get(q, auto_ack=False)
    ch.basic_publish("", q, b"b")
    ch.basic_publish("", q, b"c")  # (a passive declare's count can overtake publishes in RabbitMQ)
    assert get_bodies(ch, q) == [b"c"]  # "b" dropped, not "c": a unacked "a" does not count


def test_reject_publish_nacks_under_confirms_and_still_routes_elsewhere(target, names):
    conn = target.connect()
    ch = conn.channel()
    ch.confirm_delivery()
    x, full, other = names("x"), names("full"), names("other")
    ch.exchange_declare(x, "fanout", auto_delete=True)
    ch.queue_declare(full, exclusive=True,
                     arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.queue_declare(other, exclusive=True)
    ch.queue_bind(full, x)
    ch.queue_bind(other, x)
    ch.basic_publish(x, "", b"1")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish(x, "", b"2")
    assert get_bodies(ch, full) == [b"1"]
    assert get_bodies(ch, other) == [b"1", b"2"]


def test_reject_publish_without_confirms_drops_silently(target, names):
    conn = target.connect()
    ch = conn.channel()
    q = names("q")
    ch.queue_declare(q, exclusive=True, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.basic_publish("", q, b"1")
    ch.basic_publish("", q, b"2")
    assert get_bodies(ch, q) == [b"1"]


def test_reject_publish_dlx_dead_letters_the_refused_message(target, names):
    conn = target.connect()
    ch = conn.channel()
    dlx, dlq = dlx_setup(ch, names)
    q = names("q")
    ch.queue_declare(q, exclusive=True, arguments={
        "x-max-length": 1, "x-overflow": "reject-publish-dlx", "x-dead-letter-exchange": dlx})
    ch.basic_publish("", q, b"1")
    ch.basic_publish("", q, b"2")
    assert wait_for(conn, lambda: ready(ch, dlq) == 1)
    _, props, body = ch.basic_get(dlq, auto_ack=True)
    assert body == b"2" and props.headers["x-death"][0]["reason"] == "maxlen"
    assert get_bodies(ch, q) == [b"1"]


# -- priorities ----------------------------------------------------------------------


def test_priority_queue_delivers_highest_first_and_requeue_keeps_place(target, names):
    conn = target.connect()
    ch = conn.channel()
    q = names("q")
    ch.queue_declare(q, exclusive=True, arguments={"x-max-priority": 5})
    for body, prio in ((b"p0-a", None), (b"p9-clamped", 9), (b"p2", 2), (b"p0-b", 0), (b"p5", 5)):
        ch.basic_publish("", q, body, pika.BasicProperties(priority=prio))
    first, _, body = ch.basic_get(q, auto_ack=False)
    assert body == b"p9-clamped"
    second, _, body = ch.basic_get(q, auto_ack=False)
    assert body == b"p5"
    ch.basic_nack(second.delivery_tag, requeue=True)
    ch.basic_nack(first.delivery_tag, requeue=True)
    conn.process_data_events(time_limit=0.05)
    assert get_bodies(ch, q) == [b"p9-clamped", b"p5", b"p2", b"p0-a", b"p0-b"]


# -- single active consumer ----------------------------------------------------------


def test_single_active_consumer_fails_over(target, names):
    conn = target.connect()
    q = names("q")
    ch0 = conn.channel()
    ch0.queue_declare(q, exclusive=True, arguments={"x-single-active-consumer": True})
    got: list[tuple[str, bytes]] = []
    chans = []
    for name in ("a", "b"):
        ch = conn.channel()
        ch.basic_consume(q, lambda c, m, p, body, name=name: got.append((name, body)),
                         auto_ack=True, consumer_tag=f"ctag-{name}")
        chans.append(ch)
    assert ch0.queue_declare(q, passive=True).method.consumer_count == 2
    for i in range(3):
        ch0.basic_publish("", q, b"%d" % i)
    assert wait_for(conn, lambda: len(got) == 3)
    assert [n for n, _ in got] == ["a", "a", "a"]
    chans[0].close()
    ch0.basic_publish("", q, b"after")
    assert wait_for(conn, lambda: len(got) == 4)
    assert got[-1] == ("b", b"after")


# -- Leveret only ----------------------------------------------------------------------


def test_delivery_limit_dead_letters_on_a_classic_queue(broker, names):
    """x-delivery-limit on every queue type (RabbitMQ: quorum queues only)."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        ch = conn.channel()
        dlx, dlq = dlx_setup(ch, names)
        q = names("q")
        ch.queue_declare(q, exclusive=True, arguments={
            "x-delivery-limit": 1, "x-dead-letter-exchange": dlx})
        ch.basic_publish("", q, b"poison")
        for _ in range(2):  # delivered limit + 1 times
            method, _, _ = ch.basic_get(q)
            ch.basic_nack(method.delivery_tag, requeue=True)
        assert ch.basic_get(q)[0] is None
        _, props, body = ch.basic_get(dlq, auto_ack=True)
        assert body == b"poison" and props.headers["x-death"][0]["reason"] == "delivery_limit"
    finally:
        conn.close()


async def _aio_roundtrip(url: str, q: str) -> tuple[list[str], Any]:
    import aio_pika

    conn = await aio_pika.connect_robust(url)
    async with conn:
        ch = await conn.channel()
        dlx = await ch.declare_exchange(q + ".dlx", aio_pika.ExchangeType.FANOUT, auto_delete=True)
        dlq = await ch.declare_queue(q + ".dlq", exclusive=True)
        await dlq.bind(dlx)
        queue = await ch.declare_queue(q, exclusive=True, arguments={
            "x-message-ttl": 50, "x-dead-letter-exchange": dlx.name})
        await ch.default_exchange.publish(aio_pika.Message(b"late"), routing_key=queue.name)
        while (msg := await dlq.get(timeout=WAIT, fail=False)) is None:
            await asyncio.sleep(0.02)  # until it expired and was dead-lettered
        await msg.ack()
        return [d["reason"] for d in msg.headers["x-death"]], msg.headers["x-death"][0]["count"]


def test_aio_pika_sees_expired_dead_letters(target, names):
    reasons, count = asyncio.run(_aio_roundtrip(target.url, names("aio")))
    assert reasons == ["expired"] and count == 1


# -- durability (Leveret processes) --------------------------------------------------------


def _connect(b: Any) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(b.url))


def test_message_ttl_survives_restart(make_broker, names):
    """The expiry is kept as an absolute time: a restart does not restart the TTL."""
    b = make_broker()
    conn = _connect(b)
    ch = conn.channel()
    ch.confirm_delivery()
    q = names("q")
    ch.queue_declare(q, durable=True, arguments={"x-message-ttl": 600_000})
    ttl = 1.5
    published = time.monotonic()
    ch.basic_publish("", q, b"short", pika.BasicProperties(delivery_mode=2, expiration="1500"))
    ch.basic_publish("", q, b"long", PERSISTENT)
    conn.close()
    assert b.stop() == 0
    # Down until the TTL has passed: a broker that kept the expiry drops "short" as it
    # recovers; one that restarted the TTL would still hold it for 1.5 s after the start.
    time.sleep(max(0.0, published + ttl - time.monotonic()))
    b.start()
    conn = _connect(b)
    ch = conn.channel()
    assert ready(ch, q) == 1  # the first look, however long the start took
    assert get_bodies(ch, q) == [b"long"]
    conn.close()


def test_expired_while_down_is_dead_lettered_after_restart(make_broker, names):
    b = make_broker()
    conn = _connect(b)
    ch = conn.channel()
    ch.confirm_delivery()
    q, dlx, dlq = names("q"), names("dlx"), names("dlq")
    ch.exchange_declare(dlx, "fanout", durable=True)
    ch.queue_declare(dlq, durable=True)
    ch.queue_bind(dlq, dlx)
    ch.queue_declare(q, durable=True, arguments={"x-message-ttl": 100, "x-dead-letter-exchange": dlx})
    ch.basic_publish("", q, b"m", PERSISTENT)
    conn.close()
    b.stop(kill=True)
    time.sleep(0.2)
    b.start()
    conn = _connect(b)
    ch = conn.channel()
    assert wait_for(conn, lambda: ready(ch, dlq) == 1)
    assert ready(ch, q) == 0
    conn.close()


def test_dead_lettered_persistent_message_survives_kill(make_broker, names):
    b = make_broker()
    conn = _connect(b)
    ch = conn.channel()
    ch.confirm_delivery()
    q, dlq = names("q"), names("dlq")
    ch.queue_declare(dlq, durable=True)
    ch.queue_declare(q, durable=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    for i in range(20):
        ch.basic_publish("", q, b"m%d" % i, PERSISTENT)
    for _ in range(20):
        method, _, _ = ch.basic_get(q)
        ch.basic_reject(method.delivery_tag, requeue=False)
    # A persistent publish after the rejects, confirmed once its batch is on disk: the
    # rejects are in that batch or an earlier one.
    sync = names("sync")
    ch.queue_declare(sync, durable=True)
    ch.basic_publish("", sync, b"sync", PERSISTENT)
    b.stop(kill=True)
    b.start()
    conn = _connect(b)
    ch = conn.channel()
    assert ready(ch, q) == 0
    bodies = []
    while True:
        method, props, body = ch.basic_get(dlq, auto_ack=True)
        if method is None:
            break
        assert props.delivery_mode == 2 and props.headers["x-death"][0]["reason"] == "rejected"
        bodies.append(body)
    assert bodies == [b"m%d" % i for i in range(20)]
    conn.close()
