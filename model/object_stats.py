"""One channel's counters per exchange and per queue: rabbitmq_prometheus's
``channel_exchange_metrics``, ``channel_queue_metrics`` and
``channel_queue_exchange_metrics``.

A channel keeps ``ExchangeCounters`` by exchange name and ``QueueCounters`` by
queue object (``amqp/channel.py``); a consumer holds its queue's
``QueueCounters`` (found once, at basic.consume), so a delivery or an ack costs
one attribute increment and a publish one dictionary lookup by exchange name
plus one per routed queue. They are the channel's only count of these events:
its ``message_stats`` (``Channel.stats``) are summed from them when read
(``channel_totals``), so each message is counted once, not twice. Nothing is allocated per message once a channel
has met its exchanges and queues.

Queues come and go under a long-lived channel (an RPC client's reply queue per
call), so the maps keyed by queue drop deleted queues when they have grown to
``PRUNE_AT`` entries and twice what was left at the last pruning
(``without_deleted``, on the path that adds a key, never per message): amortised
O(1), and bounded by about twice the live queues a channel has met. Readers (``management_ui/
prometheus_detailed.py``) walk the live channels; a closed channel's counters
go with it, as RabbitMQ deletes a closed channel's rows.
"""

from __future__ import annotations

from typing import Any

from leveret.model.stats import Counters, MessageStats

# RabbitMQ's channel_queue_metrics, in rabbitmq_prometheus's order: (field, metric, help).
QUEUE_FIELDS = (
    ("get", "channel_get_ack_total",
     "Total number of messages fetched with basic.get in manual acknowledgement mode"),
    ("get_no_ack", "channel_get_total",
     "Total number of messages fetched with basic.get in automatic acknowledgement mode"),
    ("deliver", "channel_messages_delivered_ack_total",
     "Total number of messages delivered to consumers in manual acknowledgement mode"),
    ("deliver_no_ack", "channel_messages_delivered_total",
     "Total number of messages delivered to consumers in automatic acknowledgement mode"),
    ("redeliver", "channel_messages_redelivered_total",
     "Total number of messages redelivered to consumers"),
    ("ack", "channel_messages_acked_total", "Total number of messages acknowledged by consumers"),
    ("get_empty", "channel_get_empty_total",
     "Total number of times basic.get operations fetched no message"),
)
# RabbitMQ's channel_exchange_metrics, in rabbitmq_prometheus's order.
EXCHANGE_FIELDS = (
    ("publish", "channel_messages_published_total",
     "Total number of messages published into an exchange on a channel"),
    ("confirm", "channel_messages_confirmed_total",
     "Total number of messages published into an exchange and confirmed on the channel"),
    ("return_unroutable", "channel_messages_unroutable_returned_total",
     "Total number of messages published as mandatory into an exchange and returned to the "
     "publisher as unroutable"),
    ("drop_unroutable", "channel_messages_unroutable_dropped_total",
     "Total number of messages published as non-mandatory into an exchange and dropped as "
     "unroutable"),
)


PRUNE_AT = 64  # entries in a map keyed by queue before deleted queues are dropped


def without_deleted(counted: dict[Any, Any]) -> dict[Any, Any]:
    """``counted`` (keyed by queue) without the queues deleted since."""
    return {q: v for q, v in counted.items() if not q.deleted}


def channel_totals(exchanges: Any, queues: Any, base: MessageStats) -> MessageStats:
    """A channel's ``message_stats``: ``base`` (its confirms, and the counts of queues
    dropped by pruning) plus its counters by exchange and by queue."""
    total = MessageStats()
    total.add(base)
    for x in exchanges:
        total.publish += x.publish
        total.return_unroutable += x.return_unroutable
        total.drop_unroutable += x.drop_unroutable
    for q in queues:
        total.get += q.get
        total.get_no_ack += q.get_no_ack
        total.deliver += q.deliver
        total.deliver_no_ack += q.deliver_no_ack
        total.redeliver += q.redeliver
        total.ack += q.ack
        total.get_empty += q.get_empty
    return total


def as_message_stats(counters: QueueCounters) -> MessageStats:
    """One queue's counters as channel message_stats (for a pruned queue's)."""
    return channel_totals((), (counters,), MessageStats())


def next_prune(size: int) -> int:
    """The size at which a map left with ``size`` entries is pruned again."""
    return max(PRUNE_AT, 2 * size)


class QueueCounters(Counters):
    """What one channel fetched, was delivered and acked from one queue."""

    __slots__ = tuple(f for f, _, _ in QUEUE_FIELDS)

    def __init__(self) -> None:
        self.get = 0  # basic.get-ok, manual ack
        self.get_no_ack = 0
        self.deliver = 0  # basic.deliver, manual ack
        self.deliver_no_ack = 0
        self.redeliver = 0
        self.ack = 0
        self.get_empty = 0


class ExchangeCounters:
    """What one channel published into one exchange, and where it went: ``queues`` counts
    the messages routed to each queue (``channel_queue_exchange_metrics``).

    ``confirm`` counts a confirmed message when its confirm is decided (at the publish, or
    after its commit's wait for a persistent message in a durable queue); a commit that
    fails later (the store's error) still counted it."""

    __slots__ = ("confirm", "drop_unroutable", "prune_at", "publish", "queues",
                 "return_unroutable")

    def __init__(self) -> None:
        self.publish = 0
        self.confirm = 0
        self.return_unroutable = 0
        self.drop_unroutable = 0
        self.queues: dict[Any, int] = {}  # Queue -> messages routed there
        self.prune_at = PRUNE_AT

    def first_route(self, queue: Any) -> None:
        """The first message routed to ``queue`` (not on the per-message path)."""
        if len(self.queues) >= self.prune_at:
            self.queues = without_deleted(self.queues)
            self.prune_at = next_prune(len(self.queues))
        self.queues[queue] = 1
