"""Deduplication series: duplicates confirmed without being enqueued, per exchange window
and per deduplicating queue (``broker/dedupe.py``, ``queues/dedupe.py``).

Neither RabbitMQ nor its deduplication plugin serves such a series, so they carry
Leveret's prefix. Only exchanges and queues that deduplicate have a sample: the walk is
over the vhosts' windows, not over every queue, except for the queue mode, whose queues
are found by one attribute test each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.management_ui.prometheus_slices import Render

if TYPE_CHECKING:
    from leveret.management_ui.prometheus import Labels, Writer
    from leveret.management_ui.service import State

EXCHANGE = ("leveret_exchange_messages_deduplicated_total",
            "Messages published to a deduplicating exchange, confirmed and not enqueued "
            "because their key was in its window")
QUEUE = ("leveret_queue_messages_deduplicated_total",
         "Messages not enqueued because a message with their key was in the queue")


def _samples(state: State) -> tuple[list[tuple[Labels, float]], list[tuple[Labels, float]]]:
    exchanges: list[tuple[Labels, float]] = []
    queues: list[tuple[Labels, float]] = []
    for vhost in list(state.broker.vhosts.values()):
        for name, window in list(vhost.dedupe.items()):
            exchanges.append(((("vhost", vhost.name), ("exchange", name)), window.duplicates))
        for queue in list(vhost.queues.values()):
            if queue.dedupe is not None:
                queues.append(((("vhost", vhost.name), ("queue", queue.name)),
                               queue.dedupe.duplicates))
    return exchanges, queues


def write_per_object(w: Writer, state: State) -> Render:
    exchanges, queues = _samples(state)
    yield from w.family_steps(EXCHANGE[0], "counter", EXCHANGE[1], exchanges)
    yield from w.family_steps(QUEUE[0], "counter", QUEUE[1], queues)


def write_aggregated(w: Writer, state: State) -> Render:
    exchanges, queues = _samples(state)
    w.family(EXCHANGE[0], "counter", EXCHANGE[1], [((), sum(v for _, v in exchanges))])
    w.family(QUEUE[0], "counter", QUEUE[1], [((), sum(v for _, v in queues))])
    yield
