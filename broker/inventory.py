"""Live broker objects as plain records: the one reading both front doors share.

The management API (``management_ui/views.py``) and ``leveret ctl``
(``broker/control_inventory.py``) list queues, exchanges, bindings,
connections, channels and consumers, and close connections, through these
functions, so the two cannot drift apart. Records carry RabbitMQ's field
names (management JSON = rabbitmqctl info keys where both exist); the HTTP
layer adds what only it has (node name, sampled rates). Nothing here keeps
state or runs per message: each call reads the objects' plain attributes and
counters.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import hashlib
import json
import os
import platform
import resource
import shutil
import ssl
import time
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import quote

from leveret import __version__
from leveret.broker.alarms import DISK, MEMORY, resident_memory, total_memory
from leveret.broker.dedupe import ExchangeDedupe
from leveret.broker.queue_bytes import HeldBytes, byte_fields
from leveret.broker.sessions import ChannelSession, ClientSession
from leveret.broker.stream_inventory import consumer_fields, stream_fields
from leveret.model.errors import CONNECTION_FORCED
from leveret.queues import queue_types
from leveret.queues.policy import select
from leveret.queues.stream import Stream

# RabbitMQ's version is reported where clients (rabbitmqadmin, the UI, dashboards,
# definitions files) parse it.
RABBITMQ_VERSION = "3.10.8"
PRODUCT_NAME = "Leveret"


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


def truthy(value: Any) -> bool:
    """Lenient booleans: rabbitmqadmin and definitions files send "true"/"false" strings."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return bool(value)


# -- queues and consumers --------------------------------------------------------------------

def held_bytes(broker: Any) -> HeldBytes:
    """Unacked bytes per queue for one request (``queue_bytes.py``): pass it to every
    ``queue_record`` of the request."""
    return HeldBytes(broker.connections)


def queue_record(queue: Any, held: HeldBytes | None) -> dict[str, Any]:
    """A queue's fields (without node or rates); ``held`` (``held_bytes``, one per
    request) None: only the cheap ones (``disable_stats``)."""
    ready = queue.message_count
    unacked = queue.unacked
    vhost = queue.vhost
    out: dict[str, Any] = {
        "name": queue.name, "vhost": vhost.name, "type": queue_types.queue_type(queue.arguments),
        "state": "running", "arguments": jsonable(queue.arguments),
        "auto_delete": queue.auto_delete, "durable": queue.durable,
        "exclusive": queue.exclusive,
        "messages": ready + unacked, "messages_ready": ready, "messages_unacknowledged": unacked,
    }
    if queue.dedupe is not None:  # Leveret's field, as the exchange's
        out["deduplication"] = {"duplicates": queue.dedupe.duplicates,
                                "entries": len(queue.dedupe.keys)}
    if isinstance(queue, Stream):
        out.update(stream_fields(queue))
    if held is None:
        return out
    policy = (select(vhost.policies, "queues", queue.name, out["type"])
              if vhost.policies else None)
    consumers = queue.all_consumers()
    paged_out = queue.paged_out
    out.update({
        "consumers": len(consumers),
        "consumer_capacity": queue.consumer_utilisation,
        "consumer_utilisation": queue.consumer_utilisation,
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
        "messages_ram": ready + unacked - paged_out, "messages_ready_ram": ready - paged_out,
        "messages_unacknowledged_ram": unacked,
        "messages_paged_out": paged_out,
        **byte_fields(queue, held),  # message_bytes*, messages_persistent
    })
    return out


def consumer_record(consumer: Any) -> dict[str, Any]:
    channel = consumer.channel
    conn = channel.connection
    host, port = peer(conn)
    extra = consumer_fields(consumer.queue, consumer) if isinstance(consumer.queue, Stream) else {}
    return {
        **extra,
        "consumer_tag": consumer.tag, "ack_required": not consumer.no_ack,
        "active": consumer in consumer.queue.consumers, "activity_status": "up",
        "arguments": jsonable(consumer.arguments), "exclusive": consumer.exclusive,
        "prefetch_count": consumer.prefetch,
        "queue": {"name": consumer.queue.name, "vhost": consumer.queue.vhost.name},
        "channel_details": {
            "connection_name": connection_name(conn), "name": channel_name(channel),
            "number": channel.number, "peer_host": host, "peer_port": port, "user": conn.user,
        },
    }


def vhost_consumers(vhosts: Iterable[Any]) -> Iterator[Any]:
    for vhost in vhosts:
        for queue in vhost.queues.values():
            yield from queue.all_consumers()


# -- exchanges and bindings -----------------------------------------------------------------

def exchange_record(exchange: Any) -> dict[str, Any]:
    out = {
        "name": exchange.name, "vhost": exchange.vhost, "type": exchange.type,
        "durable": exchange.durable, "auto_delete": exchange.auto_delete,
        "internal": exchange.internal, "arguments": jsonable(exchange.arguments),
        "user_who_performed_action": "",
        **({"messages_delayed": exchange.delayed.count} if exchange.delayed is not None else {}),
    }
    window = exchange.dedupe
    if isinstance(window, ExchangeDedupe):  # Leveret's field: the plugin shows none
        out["deduplication"] = {"duplicates": window.duplicates,
                                "entries": len(window.window), "size": window.settings.size}
    return out


def properties_key(routing_key: str, arguments: dict[str, Any]) -> str:
    """RabbitMQ's binding id (``rabbit_mgmt_format:pack_binding_props``): ``~`` for no key
    and no arguments, the quoted key, or key~hash(arguments) (the hash is opaque)."""
    if not arguments:
        return quote(routing_key, safe="") if routing_key else "~"
    digest = hashlib.sha256(json.dumps(jsonable(arguments), sort_keys=True).encode()).digest()
    return quote(routing_key, safe="") + "~" + base64.urlsafe_b64encode(digest[:12]).decode()


def binding_record(vhost: str, source: str, dest: Any, routing_key: str,
                   arguments: dict[str, Any]) -> dict[str, Any]:
    kind = "queue" if hasattr(dest, "message_count") else "exchange"
    return {
        "source": source, "vhost": vhost, "destination": dest.name, "destination_type": kind,
        "routing_key": routing_key, "arguments": jsonable(arguments),
        "properties_key": properties_key(routing_key, arguments),
    }


def default_binding(vhost: str, queue: str) -> dict[str, Any]:
    """The default exchange's implicit binding to the queue named ``queue``."""
    return {"source": "", "vhost": vhost, "destination": queue, "destination_type": "queue",
            "routing_key": queue, "arguments": {}, "properties_key": properties_key(queue, {})}


def vhost_bindings(vhost: Any) -> Iterator[dict[str, Any]]:
    """Every binding of a vhost, the default exchange's implicit ones first (as RabbitMQ)."""
    for queue in vhost.queues.values():
        yield default_binding(vhost.name, queue.name)
    for exchange in vhost.exchanges.values():
        if exchange.name == "":
            continue
        for dest, rk, args in exchange.matcher.bindings():
            yield binding_record(vhost.name, exchange.name, dest, rk, args)


# -- connections and channels -----------------------------------------------------------------

def peer(conn: ClientSession) -> tuple[str, int]:
    address = conn.peer or ("", 0)
    return address[0], address[1]


def connection_name(conn: ClientSession) -> str:
    """RabbitMQ's ``"127.0.0.1:35498 -> 127.0.0.1:5672"``."""
    local = conn.local
    if local is None:
        return str(conn.name)
    return f"{conn.name} -> {local[0]}:{local[1]}"


def channel_name(channel: ChannelSession) -> str:
    return f"{connection_name(channel.connection)} ({channel.number})"


def open_connections(broker: Any, vhost: Any = None) -> list[ClientSession]:
    """Connections past connection.open (in ``vhost`` if given), by name."""
    conns = [c for c in broker.connections
             if c.vhost is not None and (vhost is None or c.vhost is vhost)]
    conns.sort(key=connection_name)
    return conns


def find_connection(broker: Any, name: str) -> ClientSession | None:
    """The connection called ``name`` (``connection_name``), or None."""
    connections: Iterable[ClientSession] = broker.connections
    for conn in connections:
        if connection_name(conn) == name:
            return conn
    return None


def close_connection(conn: ClientSession, reason: str) -> None:
    """connection.close 320 CONNECTION_FORCED with ``reason``, flushed on the next turn."""
    conn.close(CONNECTION_FORCED, reason)
    if conn.on_output is not None:
        conn.on_output()


def connection_record(conn: ClientSession) -> dict[str, Any]:
    local = conn.local or ("", 0)
    host, port = peer(conn)
    client = jsonable(conn.client_properties)
    tls = conn.tls_info
    return {
        "name": connection_name(conn), "type": "network",
        "state": "blocked" if conn.blocked else "running",
        "user": conn.user, "vhost": conn.vhost.name if conn.vhost is not None else None,
        "user_provided_name": client.get("connection_name"),
        "client_properties": client, "connected_at": int(conn.connected_at * 1000),
        "channel_max": conn.channel_max, "frame_max": conn.frame_max, "timeout": conn.heartbeat,
        "channels": len(conn.channels), "host": local[0], "port": local[1],
        "peer_host": host, "peer_port": port, "protocol": "AMQP 0-9-1",
        "auth_mechanism": conn.auth_mechanism, "ssl": tls is not None,
        "ssl_protocol": None, "ssl_cipher": None, "ssl_hash": None, "ssl_key_exchange": None,
        "peer_cert_issuer": None, "peer_cert_subject": None, "peer_cert_validity": None,
        **(tls or {}),
        "recv_oct": conn.recv_oct, "recv_cnt": conn.recv_cnt, "send_oct": conn.send_oct,
        "send_cnt": conn.send_cnt, "send_pend": 0, "user_who_performed_action": conn.user,
    }


def channels_of(connections: Iterable[ClientSession]) -> Iterator[ChannelSession]:
    for conn in list(connections):
        yield from list(conn.channels.values())


def channel_record(channel: ChannelSession) -> dict[str, Any]:
    conn = channel.connection
    host, port = peer(conn)
    confirms = channel.confirms
    return {
        "name": channel_name(channel), "number": channel.number,
        "connection_details": {"name": connection_name(conn), "peer_host": host,
                               "peer_port": port},
        "user": conn.user, "vhost": channel.vhost.name if channel.vhost is not None else None,
        "consumer_count": len(channel.consumers), "prefetch_count": channel.consumer_prefetch,
        "global_prefetch_count": channel.global_prefetch,
        "confirm": confirms is not None, "transactional": channel.tx is not None,
        "messages_unacknowledged": channel.unacked_count,
        "messages_unconfirmed": confirms.unconfirmed if confirms is not None else 0,
        "messages_uncommitted": len(channel.tx) if channel.tx is not None else 0,
        "acks_uncommitted": 0, "pending_raft_commands": 0,
        "state": "running" if channel.active else "flow",
        "user_who_performed_action": conn.user,
    }


# -- the node ---------------------------------------------------------------------------------

def node_record(broker: Any) -> dict[str, Any]:
    """The process's resources, as /api/nodes and ``rabbitmqctl status`` report them."""
    config = broker.config
    try:
        disk_free = shutil.disk_usage(config.data_dir).free
    except OSError:
        disk_free = 0
    fd_total = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    try:
        fd_used = len(os.listdir("/proc/self/fd"))
    except OSError:
        fd_used = 0
    return {
        "name": broker.cluster_name, "type": "disc", "running": True,
        "os_pid": str(os.getpid()), "mem_used": resident_memory(),
        "mem_limit": int(total_memory() * config.memory_high_watermark),
        "mem_alarm": MEMORY in broker.alarms, "mem_calculation_strategy": "rss",
        "disk_free": disk_free, "disk_free_limit": config.disk_free_limit,
        "disk_free_alarm": DISK in broker.alarms,
        "fd_used": fd_used, "fd_total": fd_total,
        "sockets_used": len(broker.protocols), "sockets_total": fd_total,
        "uptime": int((time.time() - broker.started_at) * 1000),
        "processors": os.cpu_count() or 1, "db_dir": str(config.data_dir),
    }


# What rabbitmqctl status says each listener is for (RabbitMQ 3.10.8's texts; Leveret's AMQP
# listener speaks 0-9-1 only).
LISTENER_PURPOSE = {
    "amqp": "AMQP 0-9-1", "amqp/ssl": "AMQP 0-9-1 over TLS", "http": "HTTP API",
    "https": "HTTP API over TLS (HTTPS)",
    "http/prometheus": "Prometheus exporter API over HTTP",
}


def status_record(broker: Any) -> dict[str, Any]:
    """``rabbitmqctl status --formatter json``'s keys, for what one Leveret node has
    (RabbitMQ 3.10.8's, compared in ``test_differential_ctl.py``), plus ``node`` (the text's
    "Status of node" line). Left out: Erlang's (``erlang_version``, ``processes``,
    ``run_queue``, ``net_ticktime``), plugins' (``enabled_plugin_file``), Raft's
    (``raft_data_directory``); ``memory`` has the totals and strategy, not Erlang's
    allocation categories."""
    node = node_record(broker)
    config = broker.config
    rss = node["mem_used"]
    return {
        "node": broker.cluster_name,
        "active_plugins": [], "alarms": sorted(broker.alarms), "config_files": [],
        "crypto_lib_version": ssl.OPENSSL_VERSION, "data_directory": node["db_dir"],
        "disk_free": node["disk_free"], "disk_free_limit": node["disk_free_limit"],
        "file_descriptors": {"sockets_limit": node["sockets_total"],
                             "sockets_used": node["sockets_used"],
                             "total_limit": node["fd_total"], "total_used": node["fd_used"]},
        "is_under_maintenance": False,
        "listeners": [{"interface": ip, "node": broker.cluster_name, "port": port,
                       "protocol": p, "purpose": LISTENER_PURPOSE.get(p, p)}
                      for p, ip, port in broker.listeners],
        "log_files": ["<stderr>"],
        "memory": {"strategy": "rss", "total": {"rss": rss}},
        "os": platform.system(), "pid": os.getpid(),
        "product_name": PRODUCT_NAME, "product_version": __version__,
        "rabbitmq_version": RABBITMQ_VERSION, "release_series_support_status": "supported",
        "totals": {"virtual_host_count": len(broker.vhosts),
                   "connection_count": len(broker.connections),
                   "queue_count": sum(len(v.queues) for v in broker.vhosts.values())},
        "uptime": node["uptime"] // 1000,
        "vm_memory_calculation_strategy": "rss",
        "vm_memory_high_watermark_limit": node["mem_limit"],
        "vm_memory_high_watermark_setting": {"relative": config.memory_high_watermark},
    }
