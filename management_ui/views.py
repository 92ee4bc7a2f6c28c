"""Broker objects as RabbitMQ's management JSON (field names checked against 3.10.8).

The fields come from ``broker/inventory.py`` (shared with ``leveret ctl``);
this module adds what only HTTP has: the node name and per-object rates from
the sampler. Erlang-only fields (reductions, garbage_collection,
backing_queue_status) are left out. Per-queue counters (published,
delivered, redelivered, acked) are the queue's own; ``queue_message_stats``
is the one place that maps them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import unquote

from leveret.broker import inventory
from leveret.broker.inventory import (
    channel_name,
    connection_name,
    jsonable,
    properties_key,
    vhost_bindings,
)
from leveret.broker.queue_bytes import HeldBytes
from leveret.model.stats import FIELDS as MESSAGE_STATS_FIELDS

if TYPE_CHECKING:
    from leveret.management_ui.service import State

# Shared with ``leveret ctl``; re-exported for the route modules.
__all__ = ["channel_name", "connection_name", "jsonable", "properties_key", "vhost_bindings"]

CHANNEL_RATE_FIELDS = (*MESSAGE_STATS_FIELDS, "deliver_get")
# What the sampler keeps per queue (``history.py``), in this order: lengths, then counters.
QUEUE_LENGTHS = ("messages", "messages_ready", "messages_unacknowledged")
QUEUE_STATS = ("publish", "deliver_get", "redeliver", "ack")
EXCHANGE_STATS = ("publish_in", "publish_out")
CONNECTION_OCTETS = ("recv_oct", "send_oct")


# Sample points one list answer may hold per field, over all its objects (``bounded``).
LIST_POINTS = 20_000


class Ranges(NamedTuple):
    """RabbitMQ's chart ranges (``?lengths_age=600&lengths_incr=5``, ``msg_rates_*``,
    ``data_rates_*``): (age, incr) in seconds, None when not asked; with a range the
    matching ``X_details`` carry samples."""

    lengths: tuple[int | None, int | None] = (None, None)
    msg_rates: tuple[int | None, int | None] = (None, None)
    data_rates: tuple[int | None, int | None] = (None, None)

    @classmethod
    def of(cls, query: Mapping[str, str]) -> Ranges:
        def pair(kind: str) -> tuple[int | None, int | None]:
            try:
                age = int(query[f"{kind}_age"]) if query.get(f"{kind}_age") else None
                incr = int(query[f"{kind}_incr"]) if query.get(f"{kind}_incr") else None
            except ValueError:
                return None, None
            return (age, incr) if age is None or age > 0 else (None, None)
        return cls(pair("lengths"), pair("msg_rates"), pair("data_rates"))

    def bounded(self, objects: int) -> Ranges:
        """These ranges for a list that formats ``objects`` objects: ``incr`` raised so a
        field has at most ``LIST_POINTS // objects`` points (at least 2), which bounds the
        work of one answer. Where Leveret differs: RabbitMQ answers every point asked."""
        most = max(2, LIST_POINTS // max(objects, 1))

        def bound(pair: tuple[int | None, int | None]) -> tuple[int | None, int | None]:
            age, incr = pair
            if age is None:
                return pair
            step = max(incr or 1, 1)
            if age // step > most:
                step = -(-age // most)  # ceiling
            return age, step
        return Ranges(bound(self.lengths), bound(self.msg_rates), bound(self.data_rates))


NO_RANGES = Ranges()


def with_rates(counters: Mapping[str, int], rates: list[float] | None = None,
               names: tuple[str, ...] | None = None) -> dict[str, Any]:
    """``{"publish": n, "publish_details": {"rate": r}, ...}``."""
    out: dict[str, Any] = {}
    names = names or tuple(counters)
    for i, name in enumerate(names):
        out[name] = counters.get(name, 0)
        out[f"{name}_details"] = {"rate": rates[i] if rates else 0.0}
    return out


def with_details(counters: Mapping[str, int], details: Mapping[str, dict[str, Any]]
                 ) -> dict[str, Any]:
    """``{"publish": n, "publish_details": {...}, ...}`` for the names in ``details``."""
    out: dict[str, Any] = {}
    for name, d in details.items():
        out[name] = counters.get(name, 0)
        out[f"{name}_details"] = d
    return out


# -- queues -------------------------------------------------------------------------------

def queue_message_stats(queue: Any) -> dict[str, int]:
    """Per-queue counters, kept by the queue itself (plain integers, ``queues/queue.py``),
    under RabbitMQ's queue ``message_stats`` names. The one place that maps them."""
    delivered = queue.delivered
    return {"publish": queue.published, "deliver_get": delivered, "redeliver": queue.redelivered,
            "ack": queue.acked}


def queue_key(queue: Any) -> tuple[str, str, str]:
    return ("q", queue.vhost.name, queue.name)


def queue_json(queue: Any, state: Any, stats: bool = True,
               held: HeldBytes | None = None, ranges: Ranges = NO_RANGES) -> dict[str, Any]:
    """``held``: the request's unacked bytes (``inventory.held_bytes``), shared by the
    queues of a list; one is made for a single queue."""
    if stats and held is None:
        held = inventory.held_bytes(state.broker)
    out = inventory.queue_record(queue, held if stats else None)
    out["node"] = state.node
    if not stats:
        return out
    key = queue_key(queue)
    s = state.sampler
    for name, d in s.object_details(key, QUEUE_LENGTHS, 0, *ranges.lengths).items():
        out[f"{name}_details"] = d
    out["message_stats"] = with_details(
        queue_message_stats(queue),
        s.object_details(key, QUEUE_STATS, len(QUEUE_LENGTHS), *ranges.msg_rates))
    return out


def consumer_json(consumer: Any, state: Any) -> dict[str, Any]:
    out = inventory.consumer_record(consumer)
    out["channel_details"]["node"] = state.node
    return out


# -- exchanges and bindings -----------------------------------------------------------------

def exchange_key(vhost: str, name: str) -> tuple[str, str, str]:
    return ("x", vhost, name)


def exchange_json(exchange: Any, state: State | None = None, ranges: Ranges = NO_RANGES
                  ) -> dict[str, Any]:
    """With ``state``: ``message_stats`` (``publish_in``/``publish_out``, summed from the
    channels' counters each round, ``exchange_tally.py``), as RabbitMQ shows once an
    exchange has seen a publish."""
    out = inventory.exchange_record(exchange)
    if state is None:
        return out
    key = exchange_key(exchange.vhost, exchange.name)
    counts = state.exchange_tally.totals.get(key[1:])
    if counts is not None:
        out["message_stats"] = with_details(
            dict(zip(EXCHANGE_STATS, counts, strict=True)),
            state.sampler.object_details(key, EXCHANGE_STATS, 0, *ranges.msg_rates))
    return out


def same_properties_key(key: str, from_path: str) -> bool:
    """The path segment arrives percent-decoded; the key is quoted."""
    return unquote(key) == from_path


# -- connections and channels -----------------------------------------------------------------

def connection_json(conn: Any, state: Any, ranges: Ranges = NO_RANGES) -> dict[str, Any]:
    out = inventory.connection_record(conn)
    out["node"] = state.node
    for name, d in state.sampler.object_details(("c", id(conn)), CONNECTION_OCTETS, 0,
                                                *ranges.data_rates).items():
        out[f"{name}_details"] = d
    return out


def channel_json(channel: Any, state: Any, ranges: Ranges = NO_RANGES) -> dict[str, Any]:
    out = inventory.channel_record(channel)
    out["node"] = state.node
    out["message_stats"] = with_details(
        channel.stats.as_dict(),
        state.sampler.object_details(("ch", id(channel)), CHANNEL_RATE_FIELDS, 0,
                                     *ranges.msg_rates))
    return out


def vhost_channels(broker: Any) -> Iterator[Any]:
    return inventory.channels_of(broker.connections)
