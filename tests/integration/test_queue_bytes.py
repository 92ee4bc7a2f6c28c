"""The queues' byte totals (``message_bytes*`` over HTTP, ``rabbitmq_queue_messages_*bytes``
in Prometheus) with known body sizes: against the live RabbitMQ 3.10.8 for a small queue
(where it answers), and for a durable queue deep enough to page, across a restart."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pika

from tests.integration.conftest import HttpApi
from tests.integration.test_prometheus import parse, scrape

Q = "/queues/%2F/"
FIELDS = ("message_bytes", "message_bytes_ready", "message_bytes_unacknowledged",
          "message_bytes_ram", "message_bytes_persistent", "message_bytes_paged_out",
          "messages_persistent", "messages_paged_out")
# Prometheus family (after rabbitmq_queue_ / rabbitmq_detailed_queue_) -> the HTTP field.
SERIES = {"messages_bytes": "message_bytes", "messages_ready_bytes": "message_bytes_ready",
          "messages_unacked_bytes": "message_bytes_unacknowledged",
          "messages_ram_bytes": "message_bytes_ram",
          "messages_persistent_bytes": "message_bytes_persistent",
          "messages_paged_out_bytes": "message_bytes_paged_out",
          "messages_persistent": "messages_persistent",
          "messages_paged_out": "messages_paged_out"}
RABBITMQ_METRICS = "http://127.0.0.1:15692"
# RabbitMQ refreshes its queue stats every 5 s: values may need that long to show.
SETTLE = 60.0  # a hang guard: each wait ends once the value shows
PERSISTENT = pika.BasicProperties(delivery_mode=2)
TRANSIENT = pika.BasicProperties(delivery_mode=1)
# A lazy queue pages past PAGE_HIGH whatever the memory (queues/paging.py).
LAZY = {"x-queue-mode": "lazy"}


def _http(api: HttpApi, queue: str) -> dict[str, int]:
    body = api.ok(Q + queue)
    return {k: body.get(k) for k in FIELDS}  # RabbitMQ: absent until its first stats round


def _prometheus(metrics_url: str, queue: str, detailed: bool = False) -> dict[str, float]:
    """The queue's series by HTTP field name: the byte totals and the persistent and
    paged-out counts, per object or in the detailed family."""
    path, prefix = "/metrics/per-object", "rabbitmq_queue_"
    if detailed:
        path, prefix = "/metrics/detailed?family=queue_metrics", "rabbitmq_detailed_queue_"
    _, samples = parse(scrape(metrics_url + path)[1])
    return {SERIES[name[len(prefix):]]: value for name, labels, value in samples
            if name.startswith(prefix) and name[len(prefix):] in SERIES
            and labels == {"vhost": "/", "queue": queue}}


def _eventually(read: Callable[[], Any], expected: Any, timeout: float = SETTLE,
                pump: pika.BlockingConnection | None = None) -> Any:
    """``read()`` once it equals ``expected`` (or its last value, for the assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        got = read()
        if got == expected or time.monotonic() > deadline:
            return got
        if pump is not None:
            pump.process_data_events(0.1)
        else:
            time.sleep(0.1)


def _expected(ready: int, unacked: int, persistent: int, paged_out: int = 0,
              messages_persistent: int = 0, messages_paged_out: int = 0) -> dict[str, int]:
    return {"message_bytes": ready + unacked, "message_bytes_ready": ready,
            "message_bytes_unacknowledged": unacked,
            "message_bytes_ram": ready + unacked - paged_out,
            "message_bytes_persistent": persistent, "message_bytes_paged_out": paged_out,
            "messages_persistent": messages_persistent, "messages_paged_out": messages_paged_out}


def test_byte_fields_of_a_small_queue_as_rabbitmq(target, request, qname):
    """Three persistent bodies (100, 200, 300 B) and three transient ones (10, 20, 40 B) in a
    durable queue with two delivered and unacked (100, 200), and in a transient queue with
    one fetched and unacked (100): RabbitMQ counts bodies only, ``persistent`` only in the
    durable queue (unacked ones too), and holds all of it in RAM. Leveret the same."""
    if target.name == "rabbitmq":
        api, metrics = request.getfixturevalue("rabbitmq_http"), RABBITMQ_METRICS
    else:
        broker = request.getfixturevalue("broker")
        api, metrics = HttpApi(broker.api_url + "/api"), broker.metrics_url
    durable, transient = qname + "-d", qname + "-t"
    conn = target.connect()
    ch = conn.channel()
    ch.confirm_delivery()  # confirmed: on disk, counted as persistent
    try:
        for name, is_durable in ((durable, True), (transient, False)):
            ch.queue_declare(name, durable=is_durable)
            for size, props in ((100, PERSISTENT), (200, PERSISTENT), (300, PERSISTENT),
                                (10, TRANSIENT), (20, TRANSIENT), (40, TRANSIENT)):
                ch.basic_publish("", name, b"x" * size, props)
        consumer = conn.channel()
        consumer.basic_qos(prefetch_count=2)
        got: list[int] = []
        consumer.basic_consume(durable, lambda c, m, p, b: got.append(len(b)))
        getter = conn.channel()
        method, _, body = getter.basic_get(transient, auto_ack=False)
        assert method is not None and len(body) == 100
        assert _eventually(lambda: sorted(got), [100, 200], pump=conn) == [100, 200]
        expected = {durable: _expected(370, 300, 600, messages_persistent=3),
                    transient: _expected(570, 100, 0)}
        for name, want in expected.items():
            assert _eventually(lambda q=name: _http(api, q), want) == want, (target.name, name)
            try:
                per_object = _eventually(lambda q=name: _prometheus(metrics, q), want)
            except OSError:
                continue  # RabbitMQ without its Prometheus plugin: the HTTP check stands
            assert per_object == want, (target.name, name)
            assert _eventually(lambda q=name: _prometheus(metrics, q, detailed=True),
                               want) == want, (target.name, name)
    finally:
        for name in (durable, transient):
            conn.channel().queue_delete(name)


def test_byte_fields_of_a_paged_queue_across_a_restart(make_broker, tmp_path):
    """A lazy durable queue past PAGE_HIGH (queues/paging.py): 10,200 persistent bodies of
    100 B, then 300 transient ones of 30 B, the tail paged out (200 persistent, 300
    transient); 5 delivered and unacked. Every field over HTTP, per-object and detailed
    Prometheus; then after a restart (the transient ones and the deliveries are gone, all
    of it is on disk, its bytes known from the store without reading it), and once part
    of it is read back."""
    b = make_broker(tmp_path / "data")
    api = HttpApi(b.api_url + "/api")
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
    ch = conn.channel()
    ch.queue_declare("deep", durable=True, arguments=LAZY)
    for _ in range(10_200):
        ch.basic_publish("", "deep", b"p" * 100, PERSISTENT)
    for _ in range(300):
        ch.basic_publish("", "deep", b"t" * 30, TRANSIENT)
    assert _eventually(lambda: api.ok(Q + "deep")["messages"], 10_500, pump=conn) == 10_500
    consumer = conn.channel()
    consumer.basic_qos(prefetch_count=5)
    consumer.basic_consume("deep", lambda *a: None)
    want = _expected(ready=10_195 * 100 + 300 * 30, unacked=500, persistent=10_200 * 100,
                     paged_out=200 * 100 + 300 * 30, messages_persistent=10_200,
                     messages_paged_out=500)
    assert _eventually(lambda: _http(api, "deep"), want, pump=conn) == want
    assert want["message_bytes_ram"] == 1_000_000  # 9,995 ready in memory, 5 unacked
    assert _prometheus(b.metrics_url, "deep") == want
    assert _prometheus(b.metrics_url, "deep", detailed=True) == want
    _, samples = parse(scrape(b.metrics_url + "/metrics")[1])  # aggregated: the one queue
    assert {SERIES[n[len("rabbitmq_queue_"):]]: v for n, _, v in samples
            if n.startswith("rabbitmq_queue_") and n[len("rabbitmq_queue_"):] in SERIES} == want
    conn.close()

    b.stop()
    b.start()
    api = HttpApi(b.api_url + "/api")
    want = _expected(ready=1_020_000, unacked=0, persistent=1_020_000, paged_out=1_020_000,
                     messages_persistent=10_200, messages_paged_out=10_200)
    assert _http(api, "deep") == want
    assert _prometheus(b.metrics_url, "deep", detailed=True) == want

    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
    ch = conn.channel()
    for _ in range(10):  # reads PAGE_BATCH (2,000) back into memory
        method, _, body = ch.basic_get("deep", auto_ack=True)
        assert method is not None and body == b"p" * 100
    want = _expected(ready=1_019_000, unacked=0, persistent=1_019_000, paged_out=820_000,
                     messages_persistent=10_190, messages_paged_out=8_200)
    assert _eventually(lambda: _http(api, "deep"), want, pump=conn) == want
    assert _prometheus(b.metrics_url, "deep") == want
    conn.close()


def test_disable_stats_leaves_the_byte_fields_out(api, qname):
    api.put(Q + qname)
    try:
        assert not set(api.ok(f"{Q}{qname}?disable_stats=true")) & set(FIELDS)
        assert set(api.ok(Q + qname)) >= set(FIELDS)
        listed = api.ok(f"/queues/%2F?name={qname}&disable_stats=true")
        assert [set(q) & set(FIELDS) for q in listed] == [set()]
    finally:
        api.delete(Q + qname)
