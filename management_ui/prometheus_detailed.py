"""``/metrics/detailed?family=...&vhost=...``: rabbitmq_prometheus's opt-in families.

Each family writes what RabbitMQ 3.10.8's does (names, types, labels checked
against the real one): ``rabbitmq_detailed_`` metrics, and the
``rabbitmq_cluster_`` ones of ``vhost_status``, ``exchange_names`` and
``exchange_bindings``. ``build_info`` and ``identity_info`` come with every
answer, as RabbitMQ's. ``vhost`` filters the queue and exchange families.

``channel_exchange_metrics``, ``channel_queue_metrics`` and
``channel_queue_exchange_metrics`` are ``prometheus_channels.py``'s.

Not served: Erlang process reductions and memory, quorum (``ra_metrics``) and
the empty families RabbitMQ answers with only headers (``queue_churn_metrics`` ...).
``auth_attempt_detailed_metrics`` is served empty, as RabbitMQ's without
detailed auth tracking.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from leveret.broker import inventory
from leveret.management_ui import prometheus, prometheus_channels, prometheus_queues
from leveret.management_ui.prometheus import Labels, Writer
from leveret.management_ui.prometheus_slices import Render

if TYPE_CHECKING:
    from leveret.management_ui.service import State

Family = Callable[[Writer, Any, "set[str] | None"], Render]


def _connections(state: State) -> list[tuple[Labels, Any]]:
    return [((("channel", inventory.connection_name(c)),), c)
            for c in inventory.open_connections(state.broker)]


def _channels(state: State) -> list[tuple[Labels, Any]]:
    return [((("channel", inventory.channel_name(ch)),), ch)
            for ch in inventory.channels_of(inventory.open_connections(state.broker))]


def connection_churn(w: Writer, state: State, vhosts: set[str] | None) -> Render:
    churn = state.broker.churn_totals()
    for name, help_, value in (
        ("connections_opened_total", "Total number of connections opened",
         churn.connection_created),
        ("connections_closed_total", "Total number of connections closed or terminated",
         churn.connection_closed),
        ("channels_opened_total", "Total number of channels opened", churn.channel_created),
        ("channels_closed_total", "Total number of channels closed", churn.channel_closed),
        ("queues_declared_total", "Total number of queues declared", churn.queue_declared),
        ("queues_created_total", "Total number of queues created", churn.queue_created),
        ("queues_deleted_total", "Total number of queues deleted", churn.queue_deleted),
    ):
        w.one(name, "counter", help_, value)
    yield


def _queues(w: Writer, state: State, vhosts: set[str] | None,
            series: tuple[prometheus_queues.Series, ...], sized: bool) -> Render:
    found: list[prometheus_queues.Row] = []
    yield from prometheus_queues.rows(found, state, series, vhosts, sized)
    yield from prometheus_queues.write_per_object(w, series, found)


def queue_coarse(w: Writer, state: State, vhosts: set[str] | None) -> Render:
    return _queues(w, state, vhosts, prometheus_queues.COARSE, sized=False)


def queue_consumer_count(w: Writer, state: State, vhosts: set[str] | None) -> Render:
    return _queues(w, state, vhosts, (prometheus_queues.CONSUMERS,), sized=False)


def queue_metrics(w: Writer, state: State, vhosts: set[str] | None) -> Render:
    return _queues(w, state, vhosts, prometheus_queues.METRICS, sized=True)


def connection_coarse(w: Writer, state: State, vhosts: set[str] | None) -> Render:
    rows = _connections(state)
    yield from w.family_steps("connection_incoming_bytes_total", "counter",
                              "Total number of bytes received on a connection",
                              [(labels, c.recv_oct) for labels, c in rows])
    yield from w.family_steps("connection_outgoing_bytes_total", "counter",
                              "Total number of bytes sent on a connection",
                              [(labels, c.send_oct) for labels, c in rows])


def connection_metrics(w: Writer, state: State, vhosts: set[str] | None) -> Render:
    rows = _connections(state)
    for name, type_, help_, get in (
        ("connection_incoming_packets_total", "counter",
         "Total number of packets received on a connection", lambda c: c.recv_cnt),
        ("connection_outgoing_packets_total", "counter",
         "Total number of packets sent on a connection", lambda c: c.send_cnt),
        ("connection_pending_packets", "gauge",
         "Number of packets waiting to be sent on a connection", lambda c: 0),
        ("connection_channels", "gauge", "Channels on a connection",
         lambda c: len(c.channels)),
    ):
        yield from w.family_steps(name, type_, help_, [(labels, get(c)) for labels, c in rows])


def channel_metrics(w: Writer, state: State, vhosts: set[str] | None) -> Render:
    rows = [(labels, inventory.channel_record(ch)) for labels, ch in _channels(state)]
    for name, key, help_ in (
        ("channel_consumers", "consumer_count", "Consumers on a channel"),
        ("channel_messages_unacked", "messages_unacknowledged",
         "Delivered but not yet acknowledged messages"),
        ("channel_messages_unconfirmed", "messages_unconfirmed",
         "Published but not yet confirmed messages"),
        ("channel_messages_uncommitted", "messages_uncommitted",
         "Messages received in a transaction but not yet committed"),
        ("channel_acks_uncommitted", "acks_uncommitted",
         "Message acknowledgements in a transaction not yet committed"),
        ("consumer_prefetch", "prefetch_count",
         "Limit of unacknowledged messages for each consumer"),
        ("channel_prefetch", "global_prefetch_count",
         "Total limit of unacknowledged messages for all consumers on a channel"),
    ):
        yield from w.family_steps(name, "gauge", help_, [(labels, r[key]) for labels, r in rows])


def vhost_status(w: Writer, state: State, vhosts: set[str] | None) -> Render:
    yield from w.family_steps("rabbitmq_cluster_vhost_status", "gauge",
                              "Whether a given vhost is running",
                              [((("vhost", name),), 1) for name in sorted(state.broker.vhosts)
                               if vhosts is None or name in vhosts])


def _exchanges(state: State, vhosts: set[str] | None) -> list[tuple[Labels, Any]]:
    return [((("vhost", vh.name), ("exchange", x.name), ("type", x.type)), x)
            for vh in state.broker.vhosts.values() if vhosts is None or vh.name in vhosts
            for x in vh.exchanges.values()]


def exchange_names(w: Writer, state: State, vhosts: set[str] | None) -> Render:
    yield from w.family_steps("rabbitmq_cluster_exchange_name", "gauge",
                              "Enumerates exchanges without any additional info. This value "
                              "is cluster-wide. A cheaper alternative to `exchange_bindings`",
                              [(labels, 1) for labels, _ in _exchanges(state, vhosts)])


def exchange_bindings(w: Writer, state: State, vhosts: set[str] | None) -> Render:
    yield from w.family_steps("rabbitmq_cluster_exchange_bindings", "gauge",
                              "Number of bindings for an exchange. This value is cluster-wide.",
                              [(labels, sum(1 for _ in x.matcher.bindings()))
                               for labels, x in _exchanges(state, vhosts) if x.name != ""])


def auth_attempts(w: Writer, state: State, vhosts: set[str] | None) -> Render:
    ok, failed = state.http_auth
    amqp = state.broker.accounts.auth_attempts
    amqp_labels: Labels = (("protocol", "amqp091"),)
    http_labels: Labels = (("protocol", "http"),)
    for name, help_, amqp_value, http_value in (
        ("auth_attempts_total", "Total number of authorization attempts", amqp["total"],
         ok + failed),
        ("auth_attempts_succeeded_total", "Total number of successful authentication attempts",
         amqp["succeeded"], ok),
        ("auth_attempts_failed_total", "Total number of failed authentication attempts",
         amqp["failed"], failed),
    ):
        yield from w.family_steps(name, "counter", help_,
                                  [(amqp_labels, amqp_value), (http_labels, http_value)])


def auth_attempts_detailed(w: Writer, state: State, vhosts: set[str] | None) -> Render:
    for name, help_ in (
        ("auth_attempts_detailed_total", "Total number of authorization attempts with source "
         "info"),
        ("auth_attempts_detailed_succeeded_total", "Total number of successful authorization "
         "attempts with source info"),
        ("auth_attempts_detailed_failed_total", "Total number of failed authorization attempts "
         "with source info"),
    ):
        yield from w.family_steps(name, "counter", help_, [])


FAMILIES: dict[str, Family] = {
    "connection_churn_metrics": connection_churn,
    "queue_coarse_metrics": queue_coarse,
    "queue_consumer_count": queue_consumer_count,
    "queue_metrics": queue_metrics,
    "connection_coarse_metrics": connection_coarse,
    "connection_metrics": connection_metrics,
    "channel_metrics": channel_metrics,
    "channel_exchange_metrics": prometheus_channels.channel_exchange,
    "channel_queue_metrics": prometheus_channels.channel_queue,
    "channel_queue_exchange_metrics": prometheus_channels.channel_queue_exchange,
    "vhost_status": vhost_status,
    "exchange_names": exchange_names,
    "exchange_bindings": exchange_bindings,
    "auth_attempt_metrics": auth_attempts,
    "auth_attempt_detailed_metrics": auth_attempts_detailed,
}


PREFIX = "rabbitmq_detailed_"


def render(w: Writer, state: State, families: set[str], vhosts: set[str] | None) -> Render:
    """The families asked for, in FAMILIES' order, then build and identity info (``w``
    with ``PREFIX``)."""
    for name, family in FAMILIES.items():
        if name in families:
            yield from family(w, state, vhosts)
    prometheus.write_info(w, state)
