"""Prometheus metrics over HTTP: the 0.0.4 text format, rabbitmq_prometheus's names and
labels, and every metric name the Grafana dashboard RabbitMQ-Overview (gnet 10991) queries,
in its v3.10.8 and current versions (tests/data/, see NOTICE-RabbitMQ-Overview.md)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pika

DATA = Path(__file__).resolve().parent.parent / "data"
DASHBOARDS = ("RabbitMQ-Overview-v3.10.8.json", "RabbitMQ-Overview.json")
# Not served, on purpose: a message-size histogram needs work on every publish.
NOT_SERVED = {"rabbitmq_message_size_bytes_bucket", "rabbitmq_message_size_bytes_count",
              "rabbitmq_message_size_bytes_sum"}
_LABELS = re.compile(r"\{[^{}]*\}")
_CLAUSES = re.compile(r"\b(?:by|on|without|ignoring|group_left|group_right)\s*\([^()]*\)")
_LABEL_VALUES = re.compile(r"label_values\(\s*([^,()]+?)\s*,\s*\w+\s*\)")


def _strings(node: Any, keys: tuple[str, ...]) -> list[str]:
    found = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k in keys and isinstance(v, str):
                found.append(v)
            elif k in keys and isinstance(v, dict) and isinstance(v.get("query"), str):
                found.append(v["query"])
            else:
                found.extend(_strings(v, keys))
    elif isinstance(node, list):
        for v in node:
            found.extend(_strings(v, keys))
    return found


def dashboard_metric_names(path: Path) -> set[str]:
    """Metric names in the dashboard's queries: label matchers, by/on/group_left clauses and
    label_values' label argument are removed first, so label names are not counted."""
    names = set()
    for expr in _strings(json.loads(path.read_text()), ("expr", "query", "definition")):
        expr = _LABEL_VALUES.sub(r"\1", _LABELS.sub(" ", expr))
        expr = _CLAUSES.sub(" ", expr)
        names.update(re.findall(r"\brabbitmq_[a-z_]+\b", expr))
    return names


def scrape(url: str) -> tuple[str, str]:
    with urllib.request.urlopen(url, timeout=60) as resp:
        return resp.headers["Content-Type"], resp.read().decode()


def parse(text: str) -> tuple[dict[str, str], list[tuple[str, dict[str, str], float]]]:
    """(TYPE per family, samples) from the 0.0.4 text format; raises on a malformed line."""
    types: dict[str, str] = {}
    samples = []
    line_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, type_ = line.split(" ", 3)
            assert type_ in ("counter", "gauge", "untyped", "histogram", "summary"), line
            types[name] = type_
            continue
        if line.startswith("#") or not line:
            continue
        m = line_re.match(line)
        assert m, line
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        samples.append((m.group(1), labels, float(m.group(4))))
    return types, samples


def test_dashboard_names_are_extracted():
    v310 = dashboard_metric_names(DATA / DASHBOARDS[0])
    assert {"rabbitmq_identity_info", "rabbitmq_build_info",
            "rabbitmq_global_messages_received_total", "rabbitmq_queue_messages_ready",
            "rabbitmq_process_open_tcp_sockets"} <= v310
    assert not {"rabbitmq_cluster", "rabbitmq_node", "rabbitmq_version"} & v310


def test_every_dashboard_metric_is_served(broker):
    content_type, text = scrape(broker.metrics_url + "/metrics")
    assert content_type.startswith("text/plain; version=0.0.4")
    _, samples = parse(text)
    served = {name for name, _, _ in samples}
    for dashboard in DASHBOARDS:
        wanted = dashboard_metric_names(DATA / dashboard) - NOT_SERVED
        assert wanted - served == set(), dashboard


def test_identity_build_info_and_global_counters(broker, qname):
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    try:
        ch = conn.channel()
        ch.queue_declare(qname)
        ch.basic_publish("", qname, b"x")
        ch.basic_publish("", "nowhere-" + qname, b"x")
        ch.basic_get(qname, auto_ack=True)
        _, text = scrape(broker.metrics_url + "/metrics")
        types, samples = parse(text)
        by_name = {name: (labels, value) for name, labels, value in samples}
        labels, value = by_name["rabbitmq_identity_info"]
        assert value == 1 and {"rabbitmq_node", "rabbitmq_cluster"} <= set(labels)
        labels, value = by_name["rabbitmq_build_info"]
        assert value == 1 and {"rabbitmq_version", "erlang_version"} <= set(labels)
        assert types["rabbitmq_global_messages_received_total"] == "counter"
        assert types["rabbitmq_queue_messages_ready"] == "gauge"
        assert by_name["rabbitmq_global_messages_received_total"][0] == {"protocol": "amqp091"}
        assert by_name["rabbitmq_global_messages_received_total"][1] >= 2
        assert by_name["rabbitmq_global_messages_unroutable_dropped_total"][1] >= 1
        assert by_name["rabbitmq_global_messages_delivered_get_auto_ack_total"][0] == {
            "protocol": "amqp091", "queue_type": "rabbit_classic_queue"}
        assert by_name["rabbitmq_connections"][1] >= 1 and by_name["rabbitmq_channels"][1] >= 1
        # Aggregated: queue series carry no labels.
        assert by_name["rabbitmq_queue_messages_ready"][0] == {}
        ch.queue_delete(qname)
    finally:
        conn.close()


def test_per_object_and_detailed(broker, qname):
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    try:
        ch = conn.channel()
        ch.queue_declare(qname)
        for _ in range(3):
            ch.basic_publish("", qname, b"x")
        conn.process_data_events(0.1)
        _, text = scrape(broker.metrics_url + "/metrics/per-object")
        _, samples = parse(text)
        ready = [v for n, labels, v in samples if n == "rabbitmq_queue_messages_ready"
                 and labels == {"vhost": "/", "queue": qname}]
        assert ready == [3.0]
        published = [v for n, labels, v in samples
                     if n == "rabbitmq_channel_messages_published_total"
                     and labels["channel"].endswith(" (1)")]
        assert 3.0 in published
        assert any(n == "rabbitmq_connection_incoming_bytes_total" for n, _, _ in samples)
        _, text = scrape(broker.metrics_url + "/metrics/detailed?family=queue_coarse_metrics"
                         "&family=queue_consumer_count&vhost=%2F")
        _, samples = parse(text)
        assert ("rabbitmq_detailed_queue_messages_ready", {"vhost": "/", "queue": qname},
                3.0) in samples
        assert any(n == "rabbitmq_detailed_queue_consumers" for n, _, _ in samples)
        ch.queue_delete(qname)
    finally:
        conn.close()


def test_rabbitmq_serves_the_same_names(broker):
    """Every rabbitmq_* family Leveret serves exists in the live RabbitMQ, with the same type
    (skipped when no RabbitMQ Prometheus endpoint answers on :15692)."""
    try:
        _, theirs_text = scrape("http://127.0.0.1:15692/metrics")
    except OSError:
        import pytest
        pytest.skip("no RabbitMQ Prometheus endpoint on 127.0.0.1:15692")
    theirs, _ = parse(theirs_text)
    ours, _ = parse(scrape(broker.metrics_url + "/metrics")[1])
    for name, type_ in ours.items():
        if name.startswith("leveret_"):
            continue
        assert theirs.get(name) == type_, (name, type_, theirs.get(name))
