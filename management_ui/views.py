"""Broker objects as RabbitMQ's management JSON (field names checked against 3.10.8).

The fields come from ``broker/inventory.py`` (shared with ``leveret ctl``);
this module adds what only HTTP has: the node name and per-object rates from
the sampler. Erlang-only fields (reductions, garbage_collection,
backing_queue_status) are left out. Per-queue counters (published,
delivered, redelivered, acked) are the queue's own; ``queue_message_stats``
is the one place that maps them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
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

# Shared with ``leveret ctl``; re-exported for the route modules.
__all__ = ["channel_name", "connection_name", "jsonable", "properties_key", "vhost_bindings"]

CHANNEL_RATE_FIELDS = (*MESSAGE_STATS_FIELDS, "deliver_get")


def with_rates(counters: dict[str, int], rates: list[float] | None = None,
               names: tuple[str, ...] | None = None) -> dict[str, Any]:
    """``{"publish": n, "publish_details": {"rate": r}, ...}``."""
    out: dict[str, Any] = {}
    names = names or tuple(counters)
    for i, name in enumerate(names):
        out[name] = counters.get(name, 0)
        out[f"{name}_details"] = {"rate": rates[i] if rates else 0.0}
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
               held: HeldBytes | None = None) -> dict[str, Any]:
    """``held``: the request's unacked bytes (``inventory.held_bytes``), shared by the
    queues of a list; one is made for a single queue."""
    if stats and held is None:
        held = inventory.held_bytes(state.broker)
    out = inventory.queue_record(queue, held if stats else None)
    out["node"] = state.node
    if not stats:
        return out
    rates = state.sampler.object_rates(queue_key(queue), 3)
    out["messages_details"] = {"rate": rates[0]}
    out["messages_ready_details"] = {"rate": rates[1]}
    out["messages_unacknowledged_details"] = {"rate": rates[2]}
    out["message_stats"] = with_rates(queue_message_stats(queue))
    return out


def consumer_json(consumer: Any, state: Any) -> dict[str, Any]:
    out = inventory.consumer_record(consumer)
    out["channel_details"]["node"] = state.node
    return out


# -- exchanges and bindings -----------------------------------------------------------------

def exchange_json(exchange: Any) -> dict[str, Any]:
    return inventory.exchange_record(exchange)


def same_properties_key(key: str, from_path: str) -> bool:
    """The path segment arrives percent-decoded; the key is quoted."""
    return unquote(key) == from_path


# -- connections and channels -----------------------------------------------------------------

def connection_json(conn: Any, state: Any) -> dict[str, Any]:
    out = inventory.connection_record(conn)
    rates = state.sampler.object_rates(("c", id(conn)), 2)
    out["node"] = state.node
    out["recv_oct_details"] = {"rate": rates[0]}
    out["send_oct_details"] = {"rate": rates[1]}
    return out


def channel_json(channel: Any, state: Any) -> dict[str, Any]:
    out = inventory.channel_record(channel)
    rates = state.sampler.object_rates(("ch", id(channel)), len(CHANNEL_RATE_FIELDS))
    out["node"] = state.node
    out["message_stats"] = with_rates(channel.stats.as_dict(), rates, CHANNEL_RATE_FIELDS)
    return out


def vhost_channels(broker: Any) -> Iterator[Any]:
    return inventory.channels_of(broker.connections)
