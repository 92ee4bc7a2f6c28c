"""Stream queues beyond RabbitMQ 3.10's contract: durability, retention, filters, aio-pika,
the management API (``test_differential_streams.py`` holds the contract itself)."""

from __future__ import annotations

import asyncio
import time
import urllib.request
import uuid
from typing import Any

import aio_pika
import aiormq
import pika
import pytest

WAIT = 60.0  # a hang guard: every wait ends as soon as its state holds
STREAM = {"x-queue-type": "stream"}


def connect(b: Any) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(b.url))


def pump(conn: pika.BlockingConnection, done: Any, timeout: float = WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        conn.process_data_events(time_limit=0.02)
    return True


def read(conn: pika.BlockingConnection, name: str, count: int,
         arguments: dict[str, Any] | None = None) -> list[tuple[int, bytes, Any]]:
    """(offset, body, headers) of the first ``count`` deliveries from ``first``, acked."""
    ch = conn.channel()
    ch.basic_qos(prefetch_count=50)
    got: list[tuple[int, bytes, Any]] = []

    def on(ch_: Any, method: Any, props: Any, body: bytes) -> None:
        got.append((props.headers["x-stream-offset"], body, props.headers))
        ch_.basic_ack(method.delivery_tag)

    ch.basic_consume(name, on, arguments={"x-stream-offset": "first", **(arguments or {})})
    pump(conn, lambda: len(got) >= count)
    ch.close()
    return got


def publish(conn: pika.BlockingConnection, name: str, bodies: list[bytes],
            headers: list[dict[str, Any] | None] | None = None) -> None:
    ch = conn.channel()
    ch.confirm_delivery()
    for i, body in enumerate(bodies):
        ch.basic_publish("", name, body,
                         pika.BasicProperties(headers=headers[i] if headers else None))
    ch.close()


async def publish_confirmed(url: str, name: str, messages: list[aio_pika.Message]) -> None:
    """Publish concurrently (confirms on): returns once every confirm came back."""
    conn = await aio_pika.connect(url)
    try:
        ch = await conn.channel()
        await asyncio.gather(*(ch.default_exchange.publish(m, routing_key=name)
                               for m in messages))
    finally:
        await conn.close()


def test_confirmed_messages_and_offsets_survive_kill(make_broker: Any) -> None:
    """1,000 confirmed publishes, kill -9, restart: the same bodies at the same offsets, nested
    headers intact, and the next publish continues the offsets."""
    b = make_broker()
    conn = connect(b)
    conn.channel().queue_declare("s", durable=True, arguments=STREAM)
    nested = {"table": {"a": 1, "list": [1, "two", {"three": 3}]}, "array": [[1], []]}
    asyncio.run(publish_confirmed(b.url, "s", [
        aio_pika.Message(b"m%d" % i, headers=nested if i % 100 == 0 else {"i": i})
        for i in range(1000)]))
    b.stop(kill=True)
    b.start()
    conn = connect(b)
    ok = conn.channel().queue_declare("s", durable=True, arguments=STREAM).method
    assert ok.message_count == 1000
    got = read(conn, "s", 1000)
    assert [(o, body) for o, body, _ in got] == [(i, b"m%d" % i) for i in range(1000)]
    for offset in (0, 500):
        assert {k: v for k, v in got[offset][2].items() if k != "x-stream-offset"} == nested
    publish(conn, "s", [b"after"])
    assert read(conn, "s", 1001)[-1][:2] == (1000, b"after")
    conn.close()


def test_retention_by_bytes_drops_whole_segments_and_keeps_the_last(broker: Any) -> None:
    name = f"s-{uuid.uuid4().hex[:8]}"
    conn = connect(broker)
    conn.channel().queue_declare(name, durable=True, arguments={
        **STREAM, "x-max-length-bytes": 10_000, "x-stream-max-segment-size-bytes": 1_000})
    for i in range(100):  # one publish per commit: one chunk each
        publish(conn, name, [bytes([i % 256]) * 500])
    count = conn.channel().queue_declare(name, durable=True, arguments={
        **STREAM, "x-max-length-bytes": 10_000, "x-stream-max-segment-size-bytes": 1_000,
    }).method.message_count
    assert 20 <= count < 100
    got = read(conn, name, count)
    offsets = [o for o, _, _ in got]
    assert offsets == list(range(100 - count, 100))
    assert got[-1][1] == bytes([99]) * 500
    conn.channel().queue_delete(name)
    conn.close()


def test_policy_max_age_wins_over_the_argument(broker: Any, api: Any) -> None:
    name = f"aged-{uuid.uuid4().hex[:8]}"
    conn = connect(broker)
    args = {**STREAM, "x-max-age": "1Y", "x-stream-max-segment-size-bytes": 1}
    conn.channel().queue_declare(name, durable=True, arguments=args)
    publish(conn, name, [b"old"])
    status, _, _ = api.put(f"/policies/%2F/{name}", {"pattern": f"^{name}$",
                                                     "definition": {"max-age": "1s"},
                                                     "apply-to": "queues"})
    assert status in (201, 204)
    try:
        # Each publish opens a segment (1-byte segments); once the first is older than 1 s
        # it goes: poll by publishing until it has.
        deadline = time.monotonic() + WAIT
        while True:
            publish(conn, name, [b"new"])
            _, _, record = api.get(f"/queues/%2F/{name}")
            if record["stream"]["first_offset"] > 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert record["stream"]["first_offset"] > 0
        assert record["type"] == "stream"
        assert read(conn, name, 1)[0][1] == b"new"
    finally:
        api.delete(f"/policies/%2F/{name}")
        conn.channel().queue_delete(name)
        conn.close()


def test_filters_are_exact(broker: Any) -> None:
    name = f"f-{uuid.uuid4().hex[:8]}"
    conn = connect(broker)
    conn.channel().queue_declare(name, durable=True, arguments=STREAM)
    fruit = ["apple"] * 101 + ["banana"] * 101 + ["apple"] * 101
    publish(conn, name, [f.encode() for f in fruit], [{"x-stream-filter-value": f} for f in fruit])
    publish(conn, name, [b"plain"])
    bananas = read(conn, name, 101, {"x-stream-filter": "banana"})
    assert [body for _, body, _ in bananas] == [b"banana"] * 101
    assert [o for o, _, _ in bananas] == list(range(101, 202))
    both = read(conn, name, 303, {"x-stream-filter": ["banana", "apple"]})
    assert len(both) == 303
    unfiltered = read(conn, name, 304, {"x-stream-filter": ["banana", "apple"],
                                        "x-stream-match-unfiltered": True})
    assert unfiltered[-1][1] == b"plain"
    conn.channel().queue_delete(name)
    conn.close()


def test_management_shows_the_log_and_each_consumer_offset(broker: Any, api: Any) -> None:
    name = f"m-{uuid.uuid4().hex[:8]}"
    conn = connect(broker)
    ch = conn.channel()
    ch.queue_declare(name, durable=True, arguments=STREAM)
    publish(conn, name, [b"x"] * 10)
    ch.basic_qos(prefetch_count=3)
    ch.basic_consume(name, lambda *a: None, arguments={"x-stream-offset": 2}, consumer_tag="c1")
    pump(conn, lambda: api.get(f"/queues/%2F/{name}")[2].get("consumers") == 1)
    _, _, record = api.get(f"/queues/%2F/{name}")
    assert record["type"] == "stream"
    assert record["messages"] == 10
    assert record["stream"]["first_offset"] == 0 and record["stream"]["last_offset"] == 9
    _, _, consumers = api.get("/consumers/%2F")
    mine = [c for c in consumers if c["queue"]["name"] == name]
    assert mine[0]["arguments"] == {"x-stream-offset": 2}
    assert (mine[0]["stream_offset"], mine[0]["stream_lag"]) == (5, 5)  # 2, 3, 4 in flight
    with urllib.request.urlopen(broker.metrics_url + "/metrics", timeout=60) as response:
        metrics = response.read().decode()
    labels = f'vhost="/",queue="{name}"'
    assert f"leveret_stream_next_offset{{{labels}}} 10\n" in metrics
    assert f"leveret_stream_first_offset{{{labels}}} 0\n" in metrics
    assert f'leveret_stream_consumer_lag{{{labels},consumer_tag="c1"}} 5\n' in metrics
    conn.channel().queue_delete(name)
    conn.close()


async def test_aio_pika_reads_from_first_and_get_closes_with_540(broker: Any) -> None:
    name = f"a-{uuid.uuid4().hex[:8]}"
    conn = await aio_pika.connect(broker.url)
    try:
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=100)
        q = await ch.declare_queue(name, durable=True, arguments=STREAM)
        for i in range(5):
            await ch.default_exchange.publish(aio_pika.Message(b"a%d" % i), routing_key=name)
        got: list[tuple[int, bytes]] = []
        done = asyncio.Event()

        async def on(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            got.append((int(message.headers["x-stream-offset"]), message.body))
            await message.ack()
            if len(got) == 5:
                done.set()

        await q.consume(on, arguments={"x-stream-offset": "first"})
        await asyncio.wait_for(done.wait(), WAIT)
        assert got == [(i, b"a%d" % i) for i in range(5)]
        with pytest.raises(aiormq.exceptions.ConnectionNotImplemented) as caught:
            await asyncio.wait_for(q.get(), WAIT)
        assert str(caught.value).startswith("NOT_IMPLEMENTED - basic.get not supported by "
                                            f"stream queues queue '{name}'")
        # aio-pika's own flag stays False after a close from the broker (with RabbitMQ too):
        # the AMQP connection underneath is the one that is closed.
        await asyncio.wait_for(_closed(conn.transport.connection), WAIT)
    finally:
        await conn.close()
        cleanup = await aio_pika.connect(broker.url)
        await (await cleanup.channel()).queue_delete(name)
        await cleanup.close()


async def _closed(conn: Any) -> None:
    while not conn.is_closed:
        await asyncio.sleep(0.02)


def test_offset_tracking_resumes_after_the_highest_contiguous_ack_across_kill(
        make_broker: Any) -> None:
    """QoS 5, a named consumer with tracking on: 5 delivered, offsets 0, 1, 2 and 4 acked
    (3 not). After kill -9 and a restart the same tag resumes at 3, the first it did not
    settle, not at 5 where it had read to; a tag without a stored offset starts where its
    x-stream-offset says."""
    b = make_broker()
    conn = connect(b)
    conn.channel().queue_declare("s", durable=True, arguments=STREAM)
    publish(conn, "s", [b"m%d" % i for i in range(10)])
    tracked = {"x-stream-offset": "first", "x-stream-offset-tracking": True}
    ch = conn.channel()
    ch.basic_qos(prefetch_count=5)
    got: list[tuple[int, int]] = []
    ch.basic_consume("s", lambda c, m, p, body: got.append((p.headers["x-stream-offset"],
                                                            m.delivery_tag)),
                     consumer_tag="reader-1", arguments=tracked)
    pump(conn, lambda: len(got) == 5)
    for offset, tag in got:
        if offset != 3:
            ch.basic_ack(tag)
    publish(conn, "s", [b"m10"])  # its confirm: the acks' records are committed too
    b.stop(kill=True)
    b.start()
    conn = connect(b)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=5)
    resumed: list[int] = []
    fresh: list[int] = []
    ch.basic_consume("s", lambda c, m, p, body: resumed.append(p.headers["x-stream-offset"]),
                     consumer_tag="reader-1", arguments=tracked)
    ch.basic_consume("s", lambda c, m, p, body: fresh.append(p.headers["x-stream-offset"]),
                     consumer_tag="reader-2", arguments={**tracked, "x-stream-offset": 8})
    pump(conn, lambda: len(resumed) == 5 and len(fresh) == 3)
    assert resumed == [3, 4, 5, 6, 7]
    assert fresh == [8, 9, 10]
    conn.close()


def test_retention_and_last_survive_a_restart(make_broker: Any) -> None:
    """The index is rebuilt from the store (arrival times are stored per entry): after kill -9
    the same first offset, count and 'last' chunk, and retention goes on from there."""
    b = make_broker()
    conn = connect(b)
    args = {**STREAM, "x-max-length-bytes": 2_000, "x-stream-max-segment-size-bytes": 1_000}
    conn.channel().queue_declare("r", durable=True, arguments=args)
    for i in range(10):  # one publish per commit: one chunk each, two per segment
        publish(conn, "r", [bytes([i]) * 500])
    before = conn.channel().queue_declare("r", durable=True, arguments=args).method
    first = read(conn, "r", 1)[0][0]

    def last_offsets(c: pika.BlockingConnection) -> list[int]:
        ch = c.channel()
        ch.basic_qos(prefetch_count=10)
        got: list[int] = []
        ch.basic_consume("r", lambda c_, m, p, body: got.append(p.headers["x-stream-offset"]),
                         arguments={"x-stream-offset": "last"})
        pump(c, lambda: bool(got) and got[-1] == 9)
        ch.close()
        return got

    assert last_offsets(conn) == [9]
    b.stop(kill=True)
    b.start()
    conn = connect(b)
    after = conn.channel().queue_declare("r", durable=True, arguments=args).method
    assert after.message_count == before.message_count
    assert read(conn, "r", 1)[0][0] == first
    assert last_offsets(conn) == [9]
    for i in range(10, 14):
        publish(conn, "r", [bytes([i]) * 500])
    count = conn.channel().queue_declare("r", durable=True, arguments=args).method.message_count
    offsets = [o for o, _, _ in read(conn, "r", count)]
    assert offsets[0] > first and offsets[-1] == 13
    conn.close()


def test_consumers_at_different_offsets_on_one_channel(broker: Any) -> None:
    name = f"multi-{uuid.uuid4().hex[:8]}"
    conn = connect(broker)
    conn.channel().queue_declare(name, durable=True, arguments=STREAM)
    publish(conn, name, [b"m%d" % i for i in range(100)])
    ch = conn.channel()
    ch.basic_qos(prefetch_count=7)
    got: dict[str, list[int]] = {"a": [], "b": [], "c": []}

    def on(ch_: Any, method: Any, props: Any, body: bytes) -> None:
        got[method.consumer_tag].append(props.headers["x-stream-offset"])
        ch_.basic_ack(method.delivery_tag)

    for tag, offset in (("a", "first"), ("b", 50), ("c", 99)):
        ch.basic_consume(name, on, consumer_tag=tag, arguments={"x-stream-offset": offset})
    pump(conn, lambda: len(got["a"]) == 100 and len(got["b"]) == 50 and len(got["c"]) == 1)
    assert got == {"a": list(range(100)), "b": list(range(50, 100)), "c": [99]}
    conn.channel().queue_delete(name)
    conn.close()


def test_readers_on_other_channels_and_frame_sizes_get_their_own_frames(broker: Any) -> None:
    """Readers at once share each entry's encoded content: a reader on another channel
    number, or with a smaller frame_max (bodies split over several frames), still gets
    exact frames."""
    name = f"frames-{uuid.uuid4().hex[:8]}"
    conn = connect(broker)
    conn.channel().queue_declare(name, durable=True, arguments=STREAM)
    bodies = [bytes([i]) * (10_000 + i) for i in range(20)]
    publish(conn, name, bodies)
    params = pika.URLParameters(broker.url)
    params.frame_max = 4096
    small = pika.BlockingConnection(params)
    small.channel()  # its reader's channel is number 2, the others' number 1
    conns = [connect(broker), small, connect(broker)]
    got: list[list[tuple[int, bytes]]] = [[] for _ in conns]
    for c, deliveries in zip(conns, got, strict=True):
        ch = c.channel()
        ch.basic_qos(prefetch_count=5)
        ch.basic_consume(name, lambda ch_, m, p, b, out=deliveries: (
            out.append((p.headers["x-stream-offset"], b)), ch_.basic_ack(m.delivery_tag)),
            arguments={"x-stream-offset": "first"})
    deadline = time.monotonic() + WAIT
    while any(len(d) < len(bodies) for d in got) and time.monotonic() < deadline:
        for c in conns:
            c.process_data_events(time_limit=0.01)
    assert got == [list(enumerate(bodies))] * 3
    conn.channel().queue_delete(name)
    for c in (conn, *conns):
        c.close()
