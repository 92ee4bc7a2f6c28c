"""Message counters, as RabbitMQ's management ``message_stats`` names them.

Counters live where the work happens (a channel counts what it publishes,
delivers and acks) as plain integers updated in place: no stats database, no
event per message, nothing allocated on the hot path. Whoever wants totals
(the HTTP API, Prometheus, ``leveret ctl``) sums the live objects' counters
plus what closed ones left behind (``add``); rates come from whoever samples.
"""

from __future__ import annotations

from collections.abc import Iterator

# RabbitMQ's message_stats fields for channels (and vhost/overview totals).
FIELDS = (
    "publish",            # messages published on the channel
    "confirm",            # publisher confirms sent (basic.ack to the publisher)
    "return_unroutable",  # mandatory publishes returned as unroutable
    "drop_unroutable",    # non-mandatory publishes that reached no queue
    "deliver",            # basic.deliver with manual ack
    "deliver_no_ack",     # basic.deliver with no-ack
    "get",                # basic.get-ok with manual ack
    "get_no_ack",         # basic.get-ok with no-ack
    "get_empty",          # basic.get-empty
    "redeliver",          # deliveries (and get-oks) flagged redelivered
    "ack",                # deliveries acknowledged by the client
)


class Counters:
    """Named integer counters in slots: summed with ``add``, read with ``items``."""

    __slots__: tuple[str, ...] = ()

    def add(self, other: Counters) -> None:
        """Fold ``other`` (of the same kind) in, e.g. a closed channel's counts into its vhost's."""
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def items(self) -> Iterator[tuple[str, int]]:
        for name in self.__slots__:
            yield name, getattr(self, name)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in self.items() if v)
        return f"{type(self).__name__}({shown})"


class MessageStats(Counters):
    __slots__ = FIELDS

    def __init__(self) -> None:
        self.publish = 0
        self.confirm = 0
        self.return_unroutable = 0
        self.drop_unroutable = 0
        self.deliver = 0
        self.deliver_no_ack = 0
        self.get = 0
        self.get_no_ack = 0
        self.get_empty = 0
        self.redeliver = 0
        self.ack = 0

    def as_dict(self) -> dict[str, int]:
        """RabbitMQ's shape, with its derived ``deliver_get`` (every delivery, get or consume)."""
        out = dict(self.items())
        out["deliver_get"] = out["deliver"] + out["deliver_no_ack"] + out["get"] + out["get_no_ack"]
        return out


CHURN_FIELDS = (
    "connection_created", "connection_closed", "channel_created", "channel_closed",
    "queue_declared", "queue_created", "queue_deleted",
)


class Churn(Counters):
    """RabbitMQ's ``churn_rates`` counters: objects created and closed since start."""

    __slots__ = CHURN_FIELDS

    def __init__(self) -> None:
        self.connection_created = 0
        self.connection_closed = 0
        self.channel_created = 0
        self.channel_closed = 0
        self.queue_declared = 0
        self.queue_created = 0
        self.queue_deleted = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.items())
