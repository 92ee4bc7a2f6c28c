"""/metrics/detailed families against the live RabbitMQ, the leveret_ series (group commit,
store, paging), and per-vhost rates in /api/vhosts that move with the traffic."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pika
import pytest

from tests.integration.conftest import HttpApi
from tests.integration.test_prometheus import parse, scrape

FAMILIES = ("connection_churn_metrics", "queue_coarse_metrics", "queue_consumer_count",
            "queue_metrics", "connection_coarse_metrics", "connection_metrics",
            "channel_metrics", "vhost_status", "exchange_names", "exchange_bindings",
            "auth_attempt_metrics", "auth_attempt_detailed_metrics",
            "channel_exchange_metrics", "channel_queue_metrics",
            "channel_queue_exchange_metrics")
# RabbitMQ's series Leveret leaves out (prometheus_detailed.py says why): Erlang process
# reductions and memory, disk read/write counters, rabbitmq_prometheus's own scrape
# telemetry.
LEFT_OUT = {
    "rabbitmq_detailed_queue_process_reductions_total",
    "rabbitmq_detailed_connection_process_reductions_total",
    "rabbitmq_detailed_queue_process_memory_bytes",
    "rabbitmq_detailed_queue_head_message_timestamp",
    "rabbitmq_detailed_queue_disk_reads_total", "rabbitmq_detailed_queue_disk_writes_total",
    "telemetry_scrape_size_bytes", "telemetry_scrape_encoded_size_bytes",
    "telemetry_scrape_duration_seconds",
}
RABBITMQ_METRICS = "http://127.0.0.1:15692"
# A bound for states that must come, not a budget: each wait ends once its state holds.
WAIT = 120.0
# RabbitMQ 3.10.8's /metrics/per-object families Leveret does not serve (with a queue, a
# connection and a channel in use; prometheus_queues.py says why for the queue ones):
# Erlang process and VM figures, Mnesia, quorum queues' Raft, rabbitmq_prometheus's scrape
# telemetry, file I/O and message-store counters, and counters Leveret does not keep (they
# need work per message: disk and index operations, dead-lettering by reason; auth attempts
# by source).
PER_OBJECT_NOT_SERVED_PREFIXES = ("erlang_", "telemetry_", "rabbitmq_erlang_", "rabbitmq_io_",
                                  "rabbitmq_raft_", "rabbitmq_schema_db_",
                                  "rabbitmq_global_messages_dead_lettered_",
                                  "rabbitmq_auth_attempts_detailed_")
PER_OBJECT_NOT_SERVED = {
    "rabbitmq_queue_process_reductions_total", "rabbitmq_queue_process_memory_bytes",
    "rabbitmq_channel_process_reductions_total", "rabbitmq_connection_process_reductions_total",
    "rabbitmq_queue_head_message_timestamp", "rabbitmq_queue_disk_reads_total",
    "rabbitmq_queue_disk_writes_total", "rabbitmq_queue_index_read_ops_total",
    "rabbitmq_queue_index_write_ops_total",
    "rabbitmq_msg_store_read_total", "rabbitmq_msg_store_write_total",
}


def _traffic(port: int, queue: str) -> pika.BlockingConnection:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    ch = conn.channel()
    ch.queue_declare(queue)
    ch.queue_bind(queue, "amq.direct", queue)
    ch.basic_publish("", queue, b"x")
    ch.basic_qos(prefetch_count=2)
    ch.basic_consume(queue, lambda *a: None)
    conn.process_data_events(0.3)
    return conn


@pytest.fixture
def both_trafficked(broker: Any, qname: str) -> Any:
    """The same traffic (``_traffic``) on this Leveret and on the RabbitMQ on 5672, whose
    Prometheus endpoint must answer (else skip); the queues are deleted afterwards."""
    try:
        scrape(RABBITMQ_METRICS + "/metrics")
    except OSError:
        pytest.skip("no RabbitMQ Prometheus endpoint on 127.0.0.1:15692")
    conns = (_traffic(broker.port, qname), _traffic(5672, qname))
    yield
    for conn in conns:
        conn.channel().queue_delete(qname)
        conn.close()


def test_detailed_families_have_rabbitmqs_names_types_and_labels(both_trafficked, broker):
    for family in FAMILIES:
        query = f"/metrics/detailed?family={family}&vhost=%2F"
        our_types, our_samples = parse(scrape(broker.metrics_url + query)[1])
        their_types, their_samples = parse(scrape(RABBITMQ_METRICS + query)[1])
        assert our_types == {n: t for n, t in their_types.items() if n not in LEFT_OUT}, (
            family)
        our_labels = {n: set(labels) for n, labels, _ in our_samples}
        their_labels = {n: set(labels) for n, labels, _ in their_samples}
        for name in our_labels.keys() & their_labels.keys():
            if name == "rabbitmq_build_info":  # Leveret adds product_name/_version
                assert our_labels[name] >= their_labels[name]
                continue
            assert our_labels[name] == their_labels[name], (family, name)
        if family not in ("auth_attempt_detailed_metrics",):
            assert set(our_labels) - {"rabbitmq_build_info", "rabbitmq_identity_info"}, (
                f"{family} served no samples")


def test_per_object_has_rabbitmqs_names_and_types(both_trafficked, broker, qname):
    """Every family of RabbitMQ's /metrics/per-object is served with its type, but those
    listed above; every rabbitmq_queue_ one has a sample per queue."""
    our_types, our_samples = parse(scrape(broker.metrics_url + "/metrics/per-object")[1])
    their_types, their_samples = parse(scrape(RABBITMQ_METRICS + "/metrics/per-object")[1])
    missing = {name: type_ for name, type_ in their_types.items()
               if our_types.get(name) != type_ and name not in PER_OBJECT_NOT_SERVED
               and not name.startswith(PER_OBJECT_NOT_SERVED_PREFIXES)}
    assert not missing
    assert not {n for n in PER_OBJECT_NOT_SERVED if n in our_types}
    for name in their_types:  # per channel, and per exchange or queue: the same labels
        if name not in PER_OBJECT_NOT_SERVED and (name.startswith("rabbitmq_channel_") or (
                name == "rabbitmq_queue_messages_published_total")):
            their_labels = {tuple(sorted(lab)) for n, lab, _ in their_samples if n == name}
            our_labels = {tuple(sorted(lab)) for n, lab, _ in our_samples if n == name}
            assert our_labels == their_labels or not their_labels, name
    queue = {"vhost": "/", "queue": qname}
    theirs = {n for n, labels, _ in their_samples if labels == queue}
    ours = {n for n, labels, _ in our_samples if labels == queue}
    assert theirs - PER_OBJECT_NOT_SERVED == ours


def test_per_object_queue_counts(broker, qname):
    """One transient message delivered and unacked, a consumer prefetch of 2."""
    conn = _traffic(broker.port, qname)
    try:
        _, samples = parse(scrape(broker.metrics_url + "/metrics/per-object")[1])
        queue = {"vhost": "/", "queue": qname}
        values = {n: v for n, labels, v in samples if labels == queue}
        assert {n[len("rabbitmq_queue_"):]: values[n] for n in (
            "rabbitmq_queue_messages_ram", "rabbitmq_queue_messages_ready_ram",
            "rabbitmq_queue_messages_unacked_ram", "rabbitmq_queue_messages_persistent",
            "rabbitmq_queue_messages_paged_out", "rabbitmq_queue_consumers")} == {
            "messages_ram": 1, "messages_ready_ram": 0, "messages_unacked_ram": 1,
            "messages_persistent": 0, "messages_paged_out": 0, "consumers": 1}
        assert 2 in [v for n, _, v in samples if n == "rabbitmq_consumer_prefetch"]
        _, samples = parse(scrape(broker.metrics_url + "/metrics")[1])
        totals = {n: v for n, labels, v in samples if not labels}
        assert totals["rabbitmq_queue_messages_unacked_ram"] >= 1
        assert "rabbitmq_queue_consumer_capacity" not in totals  # a family without a sample
        conn.channel().queue_delete(qname)
    finally:
        conn.close()


def test_detailed_values(broker, qname):
    conn = _traffic(broker.port, qname)
    try:
        query = "/metrics/detailed?family=queue_metrics&family=exchange_bindings&family=vhost_status"
        _, samples = parse(scrape(broker.metrics_url + query)[1])
        values = {(n, tuple(sorted(labels.items()))): v for n, labels, v in samples}
        q = (("queue", qname), ("vhost", "/"))
        assert values[("rabbitmq_detailed_queue_consumers", q)] == 1
        assert values[("rabbitmq_detailed_queue_messages_ram", q)] == 1
        assert values[("rabbitmq_detailed_queue_messages_paged_out", q)] == 0
        assert values[("rabbitmq_cluster_vhost_status", (("vhost", "/"),))] == 1
        direct = (("exchange", "amq.direct"), ("type", "direct"), ("vhost", "/"))
        assert values[("rabbitmq_cluster_exchange_bindings", direct)] >= 1
        conn.channel().queue_delete(qname)
    finally:
        conn.close()


def _value(samples: list[Any], name: str, **labels: str) -> float:
    (value,) = [v for n, lab, v in samples if n == name and lab == labels]
    return value


def test_leveret_series_and_paged_out_messages(make_broker, tmp_path):
    b = make_broker(tmp_path / "data")
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
    ch = conn.channel()
    ch.queue_declare("deep", durable=True, arguments={"x-queue-mode": "lazy"})
    ch.confirm_delivery()
    props = pika.BasicProperties(delivery_mode=2)
    for _ in range(20):  # confirmed one by one: one group commit each, at least
        ch.basic_publish("", "deep", b"m" * 100, props)
    count = 10_000 + 1_000  # past PAGE_HIGH (queues/paging.py): a lazy queue's tail pages out
    unconfirmed = conn.channel()
    for _ in range(count - 20):
        unconfirmed.basic_publish("", "deep", b"m" * 100, props)
    api = HttpApi(b.api_url + "/api")
    deadline = time.monotonic() + WAIT
    while api.ok("/queues/%2F/deep")["messages"] < count:
        assert time.monotonic() < deadline
        conn.process_data_events(0.1)
    queue = api.ok("/queues/%2F/deep")
    assert queue["messages_paged_out"] > 0
    assert queue["messages_ram"] == count - queue["messages_paged_out"]
    assert queue["messages_ready_ram"] == count - queue["messages_paged_out"]

    types, samples = parse(scrape(b.metrics_url + "/metrics")[1])
    assert types["leveret_group_commit_batch_operations"] == "histogram"
    assert types["leveret_group_commit_write_seconds"] == "histogram"
    commits = _value(samples, "leveret_group_commits_total")
    assert commits >= 20
    for hist in ("leveret_group_commit_batch_operations", "leveret_group_commit_write_seconds"):
        buckets = [v for n, _, v in samples if n == f"{hist}_bucket"]
        assert buckets == sorted(buckets)  # cumulative
        assert buckets[-1] == _value(samples, f"{hist}_count") == commits
        assert _value(samples, f"{hist}_sum") > 0
    # Thousands of messages in far fewer batches: batches grew with the load.
    assert _value(samples, "leveret_group_commit_batch_operations_sum") > 10 * commits
    assert _value(samples, "leveret_store_file_bytes") > count * 100
    assert _value(samples, "leveret_queue_messages_paged_out") == queue["messages_paged_out"]
    conn.close()


def test_vhost_rates_follow_the_traffic(make_broker, tmp_path):
    """Two sampler rounds (5 s apart) with publishing between them: the vhost's rates are
    the real ones, not 0.0. The test publishes until the API shows them (however long the
    machine takes to get two rounds in), at a pace that no rate threshold is assumed from."""
    b = make_broker(tmp_path / "data")
    api = HttpApi(b.api_url + "/api")
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
    ch = conn.channel()
    ch.queue_declare("rates")

    def rates(vhost: dict) -> list[float]:
        return [vhost.get("message_stats", {}).get("publish_details", {}).get("rate", 0.0),
                vhost.get("messages_details", {}).get("rate", 0.0),
                vhost.get("messages_ready_details", {}).get("rate", 0.0),
                vhost.get("recv_oct_details", {}).get("rate", 0.0)]

    deadline = time.monotonic() + WAIT
    while not all(rate > 0 for rate in rates(api.ok("/vhosts/%2F"))):
        assert time.monotonic() < deadline, api.ok("/vhosts/%2F")
        for _ in range(20):
            ch.basic_publish("", "rates", b"x" * 10)
        conn.process_data_events(0.05)
    (listed,) = [v for v in api.ok("/vhosts") if v["name"] == "/"]
    assert rates(listed)[0] > 0
    conn.close()


# -- channel_exchange_metrics, channel_queue_metrics, channel_queue_exchange_metrics -----------

CHANNEL_OBJECT_FAMILIES = ("channel_exchange_metrics", "channel_queue_metrics",
                           "channel_queue_exchange_metrics")
D = "rabbitmq_detailed_"


def _object_traffic(port: int, vhost: str) -> pika.BlockingConnection:
    """Publishes (confirmed, unroutable dropped and returned), consumes with and without
    acks, gets with and without acks, a redelivery and an empty get, in ``vhost``."""
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", port, vhost, pika.PlainCredentials("guest", "guest")))
    pub = conn.channel()
    pub.exchange_declare("ob-x", "direct")
    for q in ("ob-q", "ob-q2", "ob-q3"):
        pub.queue_declare(q)
    pub.queue_bind("ob-q", "ob-x", "k")
    pub.queue_bind("ob-q2", "ob-x", "k")
    pub.confirm_delivery()
    for _ in range(3):
        pub.basic_publish("ob-x", "k", b"m")
    pub.basic_publish("", "ob-q", b"m")
    pub.basic_publish("ob-x", "nope", b"m")  # dropped
    conn.channel().basic_publish("ob-x", "nope", b"m", mandatory=True)  # returned
    con = conn.channel()
    con.basic_consume("ob-q", lambda ch, m, p, b: ch.basic_ack(m.delivery_tag))
    con.basic_get("ob-q2", auto_ack=True)
    method, _, _ = con.basic_get("ob-q2")
    con.basic_reject(method.delivery_tag, requeue=True)
    method, _, _ = con.basic_get("ob-q2")
    assert method.redelivered
    con.basic_ack(method.delivery_tag)
    assert con.basic_get("ob-q3") == (None, None, None)  # get-empty
    con.basic_consume("ob-q3", lambda *a: None, auto_ack=True)
    pub.basic_publish("", "ob-q3", b"m")
    return conn


# What RabbitMQ 3.10.8 answered for _object_traffic (recorded live), summed over channels:
# (metric, labels without the channel) -> value.
OBJECT_VALUES: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {
    **{(D + m, (("exchange", x),)): v for m, x, v in (
        ("channel_messages_published_total", "ob-x", 5),
        ("channel_messages_confirmed_total", "ob-x", 4),
        ("channel_messages_unroutable_dropped_total", "ob-x", 1),
        ("channel_messages_unroutable_returned_total", "ob-x", 1),
        ("channel_messages_published_total", "", 2),
        ("channel_messages_confirmed_total", "", 2),
        ("channel_messages_unroutable_dropped_total", "", 0),
        ("channel_messages_unroutable_returned_total", "", 0))},
    **{(D + m, (("queue", q),)): v for m, q, v in (
        ("channel_messages_delivered_ack_total", "ob-q", 4),
        ("channel_messages_acked_total", "ob-q", 4),
        ("channel_get_total", "ob-q2", 1),
        ("channel_get_ack_total", "ob-q2", 2),
        ("channel_messages_redelivered_total", "ob-q2", 1),
        ("channel_messages_acked_total", "ob-q2", 1),
        ("channel_get_empty_total", "ob-q3", 1),
        ("channel_messages_delivered_total", "ob-q3", 1))},
    **{(D + "queue_messages_published_total", (("exchange", x), ("queue", q))): v
       for q, x, v in (("ob-q", "ob-x", 3), ("ob-q", "", 1), ("ob-q2", "ob-x", 3),
                       ("ob-q3", "", 1))},
}


def _object_values(metrics_url: str, vhost: str) -> dict[Any, float]:
    query = "&".join(f"family={f}" for f in CHANNEL_OBJECT_FAMILIES)
    # vhost= does not filter these families (as channel_metrics): the test does.
    _, samples = parse(scrape(f"{metrics_url}/metrics/detailed?{query}&vhost=nonexistent")[1])
    out: dict[Any, float] = {}
    for name, labels, value in samples:
        if not name.startswith(D) or vhost not in (labels.get("vhost"),
                                                    labels.get("queue_vhost")):
            continue
        key = (name, tuple(sorted((k, v) for k, v in labels.items()
                                  if k not in ("channel", "vhost", "queue_vhost",
                                               "exchange_vhost"))))
        out[key] = out.get(key, 0) + value
    return {k: v for k, v in out.items() if v or k in OBJECT_VALUES}


@pytest.mark.parametrize("target", ["leveret", "rabbitmq"])
def test_channel_object_families_count_as_rabbitmq(target, broker):
    """The same traffic on both brokers, in a fresh vhost: every per-exchange and per-queue
    counter has RabbitMQ's value (zeros only where RabbitMQ prints them)."""
    if target == "rabbitmq":
        from tests.integration import test_management_permissions as mp
        api = mp._rabbitmq_api()
        try:
            scrape(RABBITMQ_METRICS + "/metrics")
        except OSError:
            api = None
        if api is None:
            pytest.skip("no RabbitMQ management API and Prometheus endpoint on 127.0.0.1")
        port, metrics_url = 5672, RABBITMQ_METRICS
    else:
        api = HttpApi(broker.api_url + "/api")
        port, metrics_url = broker.port, broker.metrics_url
    vhost = f"ob-{uuid.uuid4().hex[:6]}"
    assert api.put(f"/vhosts/{vhost}", {})[0] in (201, 204)
    try:
        assert api.put(f"/permissions/{vhost}/guest", {"configure": ".*", "write": ".*",
                                                        "read": ".*"})[0] in (201, 204)
        conn = _object_traffic(port, vhost)
        try:
            deadline = time.monotonic() + WAIT  # RabbitMQ emits channel stats every 5 s
            wanted = dict(OBJECT_VALUES)
            while True:
                seen = _object_values(metrics_url, vhost)
                relevant = {k: v for k, v in seen.items() if v or k in wanted}
                if relevant == wanted or time.monotonic() > deadline:
                    break
                conn.process_data_events(0.2)
            assert relevant == wanted
            conn.channel().queue_delete("ob-q2")  # a deleted queue's rows go
            seen = _object_values(metrics_url, vhost)
            if target == "leveret":
                assert not [k for k in seen if ("queue", "ob-q2") in k[1]]
        finally:
            conn.close()
    finally:
        api.delete(f"/vhosts/{vhost}")
