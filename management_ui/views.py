"""Broker objects as RabbitMQ's management JSON (field names checked against 3.10.8).

Each ``*_json`` reads the live object's plain attributes and counters; none
keeps state. Per-object rates come from the sampler. Erlang-only fields
(reductions, garbage_collection, backing_queue_status) are left out.
Per-queue counters (published, delivered, redelivered, acked) are the
queue's own; ``queue_message_stats`` is the one place that maps them.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import hashlib
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote

from leveret.model.stats import FIELDS as MESSAGE_STATS_FIELDS
from leveret.queues import queue_types
from leveret.queues.policy import select

CHANNEL_RATE_FIELDS = (*MESSAGE_STATS_FIELDS, "deliver_get")


def jsonable(value: Any) -> Any:
    """AMQP table values (bytes, decimals, timestamps) as JSON values."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    return value


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


def queue_json(queue: Any, state: Any, stats: bool = True) -> dict[str, Any]:
    ready = queue.message_count
    unacked = queue.unacked
    vhost = queue.vhost
    out: dict[str, Any] = {
        "name": queue.name, "vhost": vhost.name, "type": queue_types.queue_type(queue.arguments),
        "node": state.node, "state": "running", "arguments": jsonable(queue.arguments),
        "auto_delete": queue.auto_delete, "durable": queue.durable,
        "exclusive": queue.exclusive,
        "messages": ready + unacked, "messages_ready": ready, "messages_unacknowledged": unacked,
    }
    if not stats:
        return out
    policy = (select(vhost.policies, "queues", queue.name, out["type"])
              if vhost.policies else None)
    rates = state.sampler.object_rates(queue_key(queue), 3)
    consumers = queue.all_consumers()
    out.update({
        "consumers": len(consumers),
        "consumer_capacity": 1.0 if consumers else 0.0,
        "consumer_utilisation": 1.0 if consumers else 0.0,
        "exclusive_consumer_tag": (queue.consumers[0].tag
                                   if queue.exclusive_consumer and queue.consumers else None),
        "single_active_consumer_tag": (queue.consumers[0].tag
                                       if queue.settings.single_active_consumer
                                       and queue.consumers else None),
        "policy": policy.name if policy else None,
        "operator_policy": None,
        "effective_policy_definition": dict(policy.definition) if policy else {},
        "head_message_timestamp": None,
        "memory": 0,
        "messages_details": {"rate": rates[0]},
        "messages_ready_details": {"rate": rates[1]},
        "messages_unacknowledged_details": {"rate": rates[2]},
        "messages_ram": ready + unacked, "messages_ready_ram": ready,
        "messages_unacknowledged_ram": unacked, "messages_persistent": 0,
        "messages_paged_out": 0,
    })
    out["message_stats"] = with_rates(queue_message_stats(queue))
    return out


def consumer_json(consumer: Any, state: Any) -> dict[str, Any]:
    channel = consumer.channel
    conn = channel.connection
    return {
        "consumer_tag": consumer.tag, "ack_required": not consumer.no_ack,
        "active": consumer in consumer.queue.consumers, "activity_status": "up",
        "arguments": jsonable(consumer.arguments), "exclusive": consumer.exclusive,
        "prefetch_count": consumer.prefetch,
        "queue": {"name": consumer.queue.name, "vhost": consumer.queue.vhost.name},
        "channel_details": {
            "connection_name": connection_name(conn), "name": channel_name(channel),
            "node": state.node, "number": channel.number, "peer_host": _peer(conn)[0],
            "peer_port": _peer(conn)[1], "user": conn.user,
        },
    }


# -- exchanges and bindings -----------------------------------------------------------------

def exchange_json(exchange: Any) -> dict[str, Any]:
    return {
        "name": exchange.name, "vhost": exchange.vhost, "type": exchange.type,
        "durable": exchange.durable, "auto_delete": exchange.auto_delete,
        "internal": exchange.internal, "arguments": jsonable(exchange.arguments),
        "user_who_performed_action": "",
    }


def properties_key(routing_key: str, arguments: dict[str, Any]) -> str:
    """RabbitMQ's binding id (``rabbit_mgmt_format:pack_binding_props``): ``~`` for no key
    and no arguments, the quoted key, or key~hash(arguments) (the hash is opaque)."""
    if not arguments:
        return quote(routing_key, safe="") if routing_key else "~"
    digest = hashlib.sha256(json.dumps(jsonable(arguments), sort_keys=True).encode()).digest()
    return quote(routing_key, safe="") + "~" + base64.urlsafe_b64encode(digest[:12]).decode()


def same_properties_key(key: str, from_path: str) -> bool:
    """The path segment arrives percent-decoded; the key is quoted."""
    return unquote(key) == from_path


def binding_json(vhost: str, source: str, dest: Any, routing_key: str,
                 arguments: dict[str, Any]) -> dict[str, Any]:
    kind = "queue" if _is_queue(dest) else "exchange"
    return {
        "source": source, "vhost": vhost, "destination": dest.name, "destination_type": kind,
        "routing_key": routing_key, "arguments": jsonable(arguments),
        "properties_key": properties_key(routing_key, arguments),
    }


def _is_queue(dest: Any) -> bool:
    return hasattr(dest, "message_count")


def vhost_bindings(vhost: Any) -> Iterator[dict[str, Any]]:
    """Every binding of a vhost, the default exchange's implicit ones first (as RabbitMQ)."""
    for queue in vhost.queues.values():
        yield binding_json(vhost.name, "", queue, queue.name, {})
    for exchange in vhost.exchanges.values():
        if exchange.name == "":
            continue
        for dest, rk, args in exchange.matcher.bindings():
            yield binding_json(vhost.name, exchange.name, dest, rk, args)


# -- connections and channels -----------------------------------------------------------------

def _peer(conn: Any) -> tuple[str, int]:
    peer = conn.peer or ("", 0)
    return peer[0], peer[1]


def connection_name(conn: Any) -> str:
    """RabbitMQ's ``"127.0.0.1:35498 -> 127.0.0.1:5672"``."""
    local = getattr(conn, "local", None)
    if local is None:
        return conn.name
    return f"{conn.name} -> {local[0]}:{local[1]}"


def channel_name(channel: Any) -> str:
    return f"{connection_name(channel.connection)} ({channel.number})"


def connection_json(conn: Any, state: Any) -> dict[str, Any]:
    local = getattr(conn, "local", None) or ("", 0)
    host, port = _peer(conn)
    rates = state.sampler.object_rates(("c", id(conn)), 2)
    client = jsonable(conn.client_properties)
    return {
        "name": connection_name(conn), "node": state.node, "type": "network",
        "state": "blocked" if conn.blocked else "running",
        "user": conn.user, "vhost": conn.vhost.name if conn.vhost is not None else None,
        "user_provided_name": client.get("connection_name"),
        "client_properties": client, "connected_at": int(conn.connected_at * 1000),
        "channel_max": conn.channel_max, "frame_max": conn.frame_max, "timeout": conn.heartbeat,
        "channels": len(conn.channels), "host": local[0], "port": local[1],
        "peer_host": host, "peer_port": port, "protocol": "AMQP 0-9-1",
        "auth_mechanism": getattr(conn, "auth_mechanism", "PLAIN"), "ssl": False,
        "ssl_protocol": None, "ssl_cipher": None, "ssl_hash": None, "ssl_key_exchange": None,
        "peer_cert_issuer": None, "peer_cert_subject": None, "peer_cert_validity": None,
        "recv_oct": conn.recv_oct, "recv_oct_details": {"rate": rates[0]},
        "recv_cnt": conn.recv_cnt, "send_oct": conn.send_oct,
        "send_oct_details": {"rate": rates[1]}, "send_cnt": conn.send_cnt, "send_pend": 0,
        "user_who_performed_action": conn.user,
    }


def channel_json(channel: Any, state: Any) -> dict[str, Any]:
    conn = channel.connection
    host, port = _peer(conn)
    unacked = len(channel._unacked)
    confirms = channel.confirms
    stats = channel.stats.as_dict()
    rates = state.sampler.object_rates(("ch", id(channel)), len(CHANNEL_RATE_FIELDS))
    return {
        "name": channel_name(channel), "number": channel.number, "node": state.node,
        "connection_details": {"name": connection_name(conn), "peer_host": host,
                               "peer_port": port},
        "user": conn.user, "vhost": channel.vhost.name if channel.vhost is not None else None,
        "consumer_count": len(channel.consumers), "prefetch_count": channel.consumer_prefetch,
        "global_prefetch_count": channel.global_prefetch,
        "confirm": confirms is not None, "transactional": channel.tx is not None,
        "messages_unacknowledged": unacked,
        "messages_unconfirmed": confirms.unconfirmed if confirms is not None else 0,
        "messages_uncommitted": len(channel.tx) if channel.tx is not None else 0,
        "acks_uncommitted": 0, "pending_raft_commands": 0,
        "state": "running" if channel.active else "flow",
        "user_who_performed_action": conn.user,
        "message_stats": with_rates(stats, rates, CHANNEL_RATE_FIELDS),
    }


def vhost_channels(broker: Any) -> Iterator[Any]:
    for conn in list(broker.connections):
        yield from list(conn.channels.values())
