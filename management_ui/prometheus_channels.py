"""rabbitmq_prometheus's per-channel counters by exchange and by queue: the
``channel_exchange_metrics``, ``channel_queue_metrics`` and
``channel_queue_exchange_metrics`` families of ``/metrics/detailed``, and the same
series in ``/metrics/per-object``.

Each open channel's counters per exchange and per queue (``model/object_stats.py``),
with RabbitMQ 3.10.8's names, types and labels: ``{channel, vhost, exchange}``,
``{channel, vhost, queue}`` and ``{channel, queue_vhost, queue, exchange_vhost,
exchange}`` (``test_prometheus_detailed.py`` compares them, and their values, with the
live RabbitMQ). Rows of a deleted queue are left out. They ignore ``/metrics/detailed``'s
``vhost`` (RabbitMQ 3.10.8 lists every channel's rows whatever ``vhost`` asks for), as
``channel_metrics`` does. Nothing here runs per message: a scrape walks the channels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.broker import inventory
from leveret.management_ui.prometheus_slices import Render
from leveret.model import object_stats

if TYPE_CHECKING:
    from leveret.management_ui.prometheus import Writer
    from leveret.management_ui.service import State


def _named_channels(state: State) -> list[tuple[str, Any]]:
    """(channel label, channel) of every open channel."""
    return [(inventory.channel_name(ch), ch)
            for ch in inventory.channels_of(inventory.open_connections(state.broker))]


def channel_exchange(w: Writer, state: State, vhosts: set[str] | None = None) -> Render:
    rows = [((("channel", name), ("vhost", ch.vhost.name), ("exchange", exchange)), counters)
            for name, ch in _named_channels(state)
            for exchange, counters in sorted(ch.exchange_stats.items())]
    for field, metric, help_ in object_stats.EXCHANGE_FIELDS:
        yield from w.family_steps(metric, "counter", help_,
                                  [(labels, getattr(counters, field)) for labels, counters in rows])


def _live_queues(counted: dict[Any, Any]) -> list[tuple[Any, Any]]:
    """(queue, value) of the queues not deleted since, by name."""
    return sorted(((q, v) for q, v in list(counted.items()) if not q.deleted),
                  key=lambda pair: pair[0].name)


def channel_queue(w: Writer, state: State, vhosts: set[str] | None = None) -> Render:
    rows = [((("channel", name), ("vhost", ch.vhost.name), ("queue", queue.name)), counters)
            for name, ch in _named_channels(state)
            for queue, counters in _live_queues(ch.queue_stats)]
    for field, metric, help_ in object_stats.QUEUE_FIELDS:
        yield from w.family_steps(metric, "counter", help_,
                                  [(labels, getattr(counters, field)) for labels, counters in rows])


def channel_queue_exchange(w: Writer, state: State, vhosts: set[str] | None = None) -> Render:
    rows = []
    for name, ch in _named_channels(state):
        vhost = ch.vhost.name
        for exchange, counters in sorted(ch.exchange_stats.items()):
            for queue, count in _live_queues(counters.queues):
                rows.append(((("channel", name), ("queue_vhost", vhost), ("queue", queue.name),
                              ("exchange_vhost", vhost), ("exchange", exchange)), count))
    yield from w.family_steps("queue_messages_published_total", "counter",
                              "Total number of messages published to queues", rows)
