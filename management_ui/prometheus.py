"""Prometheus metrics on their own port, with rabbitmq_prometheus's names, types and labels.

``/metrics`` is aggregated (its size does not grow with queues: one walk over
them to sum), ``/metrics/per-object`` adds one series per queue, connection
and channel, ``/metrics/detailed?family=...&vhost=...`` the
``rabbitmq_detailed_`` families asked for. Text format 0.0.4 is written
directly, laid out as RabbitMQ does (``# TYPE`` then ``# HELP`` then samples;
counters keep their ``_total`` name). Unauthenticated, as RabbitMQ 3.10's, unless
``prometheus_authentication`` is on; rendered in slices and streamed (``metrics_app.py``).

Where Leveret differs: ``rabbitmq_global_messages_received_confirm_total``
is the number of messages *confirmed* (Leveret does not count publishes per
channel mode; the two differ only by messages in flight), and the message
size histogram (``rabbitmq_message_size_bytes``, dashboard HEAD) is not
served: it needs work per published message. Erlang VM families are skipped.
The queue series (``rabbitmq_queue_*``, per queue and summed) are one table in
``prometheus_queues.py``, which also says which of RabbitMQ's are not served; the
per-object channel counters by exchange and by queue are ``prometheus_channels.py``'s.

Leveret-only series (``write_leveret``) keep the ``leveret_`` prefix: the
group commit's batch sizes and write+fsync times as histograms (observed
once per batch, ``persistence/commit_stats.py``), the store's file and free
bytes, and ready messages paged out to the store. The detailed families are
in ``prometheus_detailed.py``, the routes in ``metrics_app.py``.
"""

from __future__ import annotations

import os
import resource
import shutil
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from leveret.broker.alarms import DISK, MEMORY, resident_memory, total_memory
from leveret.broker.api import Histogram
from leveret.management_ui import prometheus_channels, prometheus_dedupe, prometheus_queues, views
from leveret.management_ui.prometheus_cluster import write_replication
from leveret.management_ui.prometheus_slices import SLICE, Render, label_text
from leveret.management_ui.prometheus_streams import write_streams

if TYPE_CHECKING:
    from leveret.management_ui.service import State

LEVERET = "leveret_"  # Leveret-only series keep their own prefix
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
AMQP = (("protocol", "amqp091"),)
CLASSIC = (("protocol", "amqp091"), ("queue_type", "rabbit_classic_queue"))

Labels = tuple[tuple[str, str], ...]


class Writer:
    """Families in the 0.0.4 text format."""

    def __init__(self, prefix: str = "rabbitmq_") -> None:
        self.prefix = prefix
        self.lines: list[str] = []
        # Label sets as text, formatted once: per-object families repeat them per queue.
        self._label_text: dict[Labels, str] = {}

    def family(self, name: str, type_: str, help_: str,
               samples: Iterable[tuple[Labels | str, float]]) -> None:
        for _ in self.family_steps(name, type_, help_, samples):
            pass

    def family_steps(self, name: str, type_: str, help_: str,
                     samples: Iterable[tuple[Labels | str, float]]) -> Iterator[None]:
        """``family``, yielding every ``SLICE`` samples (where a scrape lets the loop run).
        A sample's labels are pairs, or their text (``prometheus_slices.label_text``)."""
        full = name if name.startswith((LEVERET, "rabbitmq_")) else self.prefix + name
        lines = self.lines
        lines.append(f"# TYPE {full} {type_}\n# HELP {full} {help_}\n")
        known = self._label_text
        left = SLICE
        for labels, value in samples:
            if isinstance(labels, str):  # already text (per-object rows)
                lines.append(f"{full}{{{labels}}} {_number(value)}\n")
            elif labels:
                text = known.get(labels)
                if text is None:
                    text = known[labels] = label_text(tuple((k, str(v)) for k, v in labels))
                lines.append(f"{full}{{{text}}} {_number(value)}\n")
            else:
                lines.append(f"{full} {_number(value)}\n")
            left -= 1
            if not left:
                left = SLICE
                yield

    def one(self, name: str, type_: str, help_: str, value: float, labels: Labels = ()) -> None:
        self.family(name, type_, help_, [(labels, value)])

    def histogram(self, name: str, help_: str, hist: Histogram) -> None:
        """``name_bucket{le=...}``, ``name_sum``, ``name_count`` (``commit_stats.py``)."""
        self.lines.append(f"# TYPE {name} histogram\n# HELP {name} {help_}\n")
        for le, count in hist.cumulative():
            self.lines.append(f'{name}_bucket{{le="{le}"}} {count}\n')
        self.lines.append(f"{name}_sum {_number(hist.sum)}\n{name}_count {hist.count}\n")

    def text(self) -> str:
        return "".join(self.lines)

    def take(self) -> bytes:
        """What was written since the last ``take``, encoded (a streamed scrape's chunk)."""
        data = "".join(self.lines).encode()
        self.lines.clear()
        return data


def _number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def _fds() -> tuple[int, int]:
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:
        used = 0
    return used, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def write_info(w: Writer, state: State) -> None:
    """``rabbitmq_build_info`` and ``rabbitmq_identity_info``, which dashboards join on."""
    broker = state.broker
    w.one("rabbitmq_build_info", "untyped", "RabbitMQ & Erlang/OTP version info", 1, (
        ("rabbitmq_version", state.rabbitmq_version),
        ("prometheus_plugin_version", state.version),
        ("prometheus_client_version", state.version), ("erlang_version", "n/a"),
        ("product_name", state.product_name), ("product_version", state.version)))
    cluster = (broker.cluster.figures().cluster if broker.cluster is not None
               else broker.cluster_name)  # a cluster's id outlives its leaders
    w.one("rabbitmq_identity_info", "untyped", "RabbitMQ node & cluster identity info", 1, (
        ("rabbitmq_node", state.node), ("rabbitmq_cluster", cluster),
        ("rabbitmq_cluster_permanent_id", f"leveret-{cluster}")))


def write_node(w: Writer, state: State) -> None:
    """Build/identity info, object counts and churn, node resources, global counters."""
    broker, config = state.broker, state.config
    write_info(w, state)
    churn = broker.churn_totals()
    connections = list(broker.connections)
    channels = [ch for c in connections for ch in c.channels.values()]
    queues = [q for vh in broker.vhosts.values() for q in vh.queues.values()]
    consumers = sum(q.consumer_count for q in queues)
    for name, help_, value, type_ in (
        ("connections", "Connections currently open", len(connections), "gauge"),
        ("connections_opened_total", "Total number of connections opened",
         churn.connection_created, "counter"),
        ("connections_closed_total", "Total number of connections closed or terminated",
         churn.connection_closed, "counter"),
        ("channels", "Channels currently open", len(channels), "gauge"),
        ("channels_opened_total", "Total number of channels opened", churn.channel_created,
         "counter"),
        ("channels_closed_total", "Total number of channels closed", churn.channel_closed,
         "counter"),
        ("queues", "Queues available", len(queues), "gauge"),
        ("queues_declared_total", "Total number of queues declared", churn.queue_declared,
         "counter"),
        ("queues_created_total", "Total number of queues created", churn.queue_created,
         "counter"),
        ("queues_deleted_total", "Total number of queues deleted", churn.queue_deleted,
         "counter"),
        ("consumers", "Consumers currently connected", consumers, "gauge"),
    ):
        w.one(name, type_, help_, value)
    try:
        disk_free = shutil.disk_usage(config.data_dir).free
    except OSError:
        disk_free = 0
    fds, max_fds = _fds()
    for name, help_, value in (
        ("process_open_fds", "Open file descriptors", fds),
        ("process_open_tcp_sockets", "Open TCP sockets", len(broker.protocols)),
        ("process_resident_memory_bytes", "Memory used in bytes", resident_memory()),
        ("disk_space_available_bytes", "Disk space available in bytes", disk_free),
        ("process_max_fds", "Open file descriptors limit", max_fds),
        ("process_max_tcp_sockets", "Open TCP sockets limit", max_fds),
        ("resident_memory_limit_bytes", "Memory high watermark in bytes",
         int(total_memory() * config.memory_high_watermark)),
        ("disk_space_available_limit_bytes", "Free disk space low watermark in bytes",
         config.disk_free_limit),
        ("erlang_uptime_seconds", "Node uptime", round(time.time() - broker.started_at, 3)),
    ):
        w.one(name, "gauge", help_, value)
    for name, help_, on in (
        ("alarms_file_descriptor_limit",
         "is 1 if file descriptor limit alarm is in effect", False),
        ("alarms_free_disk_space_watermark",
         "is 1 if free disk space watermark alarm is in effect", DISK in broker.alarms),
        ("alarms_memory_used_watermark",
         "is 1 if VM memory watermark alarm is in effect", MEMORY in broker.alarms),
    ):
        w.one(name, "untyped", help_, int(on))  # untyped, as RabbitMQ types them
    ok, failed = state.http_auth
    http = (("protocol", "http"),)
    w.one("auth_attempts_total", "counter", "Total number of authorization attempts",
          ok + failed, http)
    w.one("auth_attempts_succeeded_total", "counter",
          "Total number of successful authentication attempts", ok, http)
    w.one("auth_attempts_failed_total", "counter",
          "Total number of failed authentication attempts", failed, http)
    w.one("global_consumers", "gauge", "Current number of consumers", consumers, AMQP)
    w.one("global_publishers", "gauge", "Current number of publishers",
          sum(1 for c in connections if c.has_published), AMQP)
    s = broker.message_stats()
    delivered = s.deliver + s.deliver_no_ack + s.get + s.get_no_ack
    for name, help_, value, labels in (
        ("received_total", "Total number of messages received from publishers", s.publish, AMQP),
        ("received_confirm_total",
         "Total number of messages received from publishers expecting confirmations",
         s.confirm, AMQP),
        ("routed_total", "Total number of messages routed to queues or streams",
         s.publish - s.drop_unroutable - s.return_unroutable, AMQP),
        ("unroutable_dropped_total", "Total number of messages published as non-mandatory "
         "into an exchange and dropped as unroutable", s.drop_unroutable, AMQP),
        ("unroutable_returned_total", "Total number of messages published as mandatory into "
         "an exchange and returned to the publisher as unroutable", s.return_unroutable, AMQP),
        ("confirmed_total", "Total number of messages confirmed to publishers", s.confirm, AMQP),
        ("delivered_total", "Total number of messages delivered to consumers", delivered,
         CLASSIC),
        ("delivered_consume_manual_ack_total", "Total number of messages delivered to "
         "consumers using basic.consume with manual acknowledgment", s.deliver, CLASSIC),
        ("delivered_consume_auto_ack_total", "Total number of messages delivered to "
         "consumers using basic.consume with automatic acknowledgment", s.deliver_no_ack,
         CLASSIC),
        ("delivered_get_manual_ack_total", "Total number of messages delivered to consumers "
         "using basic.get with manual acknowledgment", s.get, CLASSIC),
        ("delivered_get_auto_ack_total", "Total number of messages delivered to consumers "
         "using basic.get with automatic acknowledgment", s.get_no_ack, CLASSIC),
        ("get_empty_total", "Total number of times basic.get operations fetched no message",
         s.get_empty, CLASSIC),
        ("redelivered_total", "Total number of messages redelivered to consumers",
         s.redeliver, CLASSIC),
        ("acknowledged_total", "Total number of messages acknowledged by consumers", s.ack,
         CLASSIC),
    ):
        w.one(f"global_messages_{name}", "counter", help_, value, labels)
    write_leveret(w, state, queues)


def write_leveret(w: Writer, state: State, queues: list[Any]) -> None:
    """Leveret-only series: the group commit, the store, paging, streams."""
    log = state.broker.log
    w.one("leveret_store_backlogged", "gauge",
          "1 while the store writer is behind and publishers are paused", int(log.backlogged))
    w.one("leveret_group_commits_total", "counter",
          "Batches written and synced to the store", log.commits)
    w.one("leveret_group_commit_failures_total", "counter",
          "Batch writes that failed (their confirms became nacks)", log.failures)
    w.histogram("leveret_group_commit_batch_operations",
                "Store operations written by one group commit (one fsync)", log.batch_sizes)
    w.histogram("leveret_group_commit_write_seconds",
                "Time to write and fsync one group-commit batch", log.write_seconds)
    space = state.broker.store.space()
    w.one("leveret_store_file_bytes", "gauge", "Size of the message store's file(s)",
          space.file_bytes)
    w.one("leveret_store_free_bytes", "gauge",
          "Free space inside the store's file(s), reused before it grows", space.free_bytes)
    w.one("leveret_queue_messages_paged_out", "gauge",
          "Ready messages held only in the store, not in memory (all queues)",
          sum(q.paged_out for q in queues))
    delayed = [((("vhost", vh.name), ("exchange", name)), dx)
               for vh in list(state.broker.vhosts.values())
               for name, dx in list(vh.delays.by_name.items())]
    w.family("leveret_exchange_messages_delayed", "gauge",
             "Messages a delayed exchange holds until they are due",
             [(labels, dx.count) for labels, dx in delayed])
    w.family("leveret_exchange_messages_delay_released_total", "counter",
             "Messages a delayed exchange released since the node started",
             [(labels, dx.released) for labels, dx in delayed])
    w.histogram("leveret_delayed_release_lateness_seconds",
                "How long after its due time a delayed message was released",
                state.broker.delayed_lateness)
    write_streams(w, queues)
    if state.broker.cluster is not None:
        write_replication(w, state.broker.cluster.figures())


def write_queues_aggregated(w: Writer, state: State) -> Render:
    yield from prometheus_queues.write_aggregated(w, state)
    channel_consumers = sum(len(ch.consumers) for conn in list(state.broker.connections)
                            for ch in conn.channels.values())
    w.one("channel_consumers", "gauge", "Consumers on a channel", channel_consumers)


def write_queues_per_object(w: Writer, state: State) -> Render:
    found: list[prometheus_queues.Row] = []
    yield from prometheus_queues.rows(found, state, prometheus_queues.SERIES)
    yield from prometheus_queues.write_per_object(w, prometheus_queues.SERIES, found)


def render_metrics(w: Writer, state: State) -> Render:
    """``/metrics``: the node, and the queues summed."""
    write_node(w, state)
    yield
    yield from write_queues_aggregated(w, state)
    yield from prometheus_dedupe.write_aggregated(w, state)


def render_per_object(w: Writer, state: State) -> Render:
    """``/metrics/per-object``: the node, then a series per queue, connection and channel."""
    write_node(w, state)
    yield
    yield from write_queues_per_object(w, state)
    yield from prometheus_dedupe.write_per_object(w, state)
    yield from write_connections_channels(w, state)


def write_connections_channels(w: Writer, state: State) -> Render:
    conns = sorted(state.broker.connections, key=views.connection_name)
    conn_rows = [((("channel", views.connection_name(c)),), c) for c in conns]
    for name, help_, get, type_ in (
        ("connection_incoming_bytes_total", "Total number of bytes received on a connection",
         lambda c: c.recv_oct, "counter"),
        ("connection_outgoing_bytes_total", "Total number of bytes sent on a connection",
         lambda c: c.send_oct, "counter"),
        ("connection_incoming_packets_total", "Total number of packets received on a "
         "connection", lambda c: c.recv_cnt, "counter"),
        ("connection_outgoing_packets_total", "Total number of packets sent on a connection",
         lambda c: c.send_cnt, "counter"),
        ("connection_pending_packets", "Number of packets waiting to be sent on a connection",
         lambda c: 0, "gauge"),
        ("connection_channels", "Channels on a connection", lambda c: len(c.channels), "gauge"),
    ):
        yield from w.family_steps(name, type_, help_,
                                  ((labels, get(c)) for labels, c in conn_rows))
    ch_rows = [((("channel", views.channel_name(ch)),), ch)
               for c in conns for ch in sorted(c.channels.values(), key=lambda ch: ch.number)]
    for name, help_, get, type_ in (
        ("channel_consumers", "Consumers on a channel", lambda ch: len(ch.consumers), "gauge"),
        ("channel_messages_unacked", "Delivered but not yet acknowledged messages",
         lambda ch: ch.unacked_count, "gauge"),
        ("channel_messages_unconfirmed", "Published but not yet confirmed messages",
         lambda ch: ch.confirms.unconfirmed if ch.confirms is not None else 0, "gauge"),
        ("channel_messages_uncommitted", "Messages received in a transaction but not yet "
         "committed", lambda ch: len(ch.tx) if ch.tx is not None else 0, "gauge"),
        ("channel_acks_uncommitted", "Message acknowledgements in a transaction not yet "
         "committed", lambda ch: 0, "gauge"),  # as /api/channels: not counted apart
        ("consumer_prefetch", "Limit of unacknowledged messages for each consumer",
         lambda ch: ch.consumer_prefetch, "gauge"),
        ("channel_prefetch", "Total limit of unacknowledged messages for all consumers on a "
         "channel", lambda ch: ch.global_prefetch, "gauge"),
    ):
        yield from w.family_steps(name, type_, help_,
                                  ((labels, get(ch)) for labels, ch in ch_rows))
    # The counters by exchange and by queue, with RabbitMQ's labels (prometheus_channels.py).
    yield from prometheus_channels.channel_exchange(w, state)
    yield from prometheus_channels.channel_queue(w, state)
    yield from prometheus_channels.channel_queue_exchange(w, state)
