"""The control socket's object commands: rabbitmqctl's list_*, status, purge, delete,
close and definitions, on the same broker-model operations as the HTTP API.

Rows come from ``inventory.py`` (what ``/api/queues`` etc. format too) under
rabbitmqctl's info keys, in the order asked for; writes call the vhost's
operations (``purge_queue``, ``delete_queue_checked``) and
``inventory.close_connection`` exactly as the HTTP routes do; definitions go
through ``definitions.py`` (export; ``control.py`` imports, in slices).

Where rabbitmqctl shows an Erlang pid (a connection's ``pid``, a channel's
``pid`` and ``connection``, a consumer's ``channel_pid``), Leveret shows the
object's name: ``close_connection`` takes that name where rabbitmqctl takes
the pid. Info keys with no meaning here (queue pids, mirrors, disk_reads...)
are refused with rabbitmqctl's "not supported" text and its exit code 64.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from leveret.broker import definitions, inventory
from leveret.broker.accounts import AccountError
from leveret.broker.queue_bytes import HeldBytes
from leveret.model.errors import NOT_FOUND, PRECONDITION_FAILED, ChannelError, ConnectionError_

Command = Callable[[dict[str, Any]], Any]
EX_USAGE, EX_DATAERR, EX_UNAVAILABLE = 64, 65, 69

# Per command: the info keys served, and rabbitmqctl 3.10's default columns (a pid
# column shows the object's name, see above).
QUEUE_KEYS = ("name", "durable", "auto_delete", "exclusive", "arguments", "policy", "state",
              "type", "messages", "messages_ready", "messages_unacknowledged", "messages_ram",
              "messages_ready_ram", "messages_unacknowledged_ram", "messages_persistent",
              "message_bytes", "message_bytes_ready", "message_bytes_unacknowledged",
              "message_bytes_ram", "message_bytes_persistent", "consumers", "consumer_utilisation", "consumer_capacity",
              "exclusive_consumer_tag", "head_message_timestamp", "memory")
EXCHANGE_KEYS = ("name", "type", "durable", "auto_delete", "internal", "arguments", "policy")
BINDING_KEYS = ("source_name", "source_kind", "destination_name", "destination_kind",
                "routing_key", "arguments")
CONNECTION_KEYS = ("pid", "name", "user", "vhost", "peer_host", "peer_port", "host", "port",
                   "state", "channels", "protocol", "auth_mechanism", "channel_max",
                   "frame_max", "timeout", "client_properties", "connected_at", "recv_oct",
                   "recv_cnt", "send_oct", "send_cnt", "send_pend", "ssl", "ssl_protocol",
                   "ssl_cipher", "ssl_hash", "ssl_key_exchange", "peer_cert_issuer",
                   "peer_cert_subject", "peer_cert_validity")
CHANNEL_KEYS = ("pid", "name", "connection", "number", "user", "vhost", "consumer_count",
                "messages_unacknowledged", "messages_unconfirmed", "messages_uncommitted",
                "acks_uncommitted", "prefetch_count", "global_prefetch_count", "confirm",
                "transactional")
CONSUMER_KEYS = ("queue_name", "channel_pid", "consumer_tag", "ack_required",
                 "prefetch_count", "active", "activity_status", "arguments")
DEFAULTS = {
    "list_queues": ("name", "messages"),
    "list_exchanges": ("name", "type"),
    "list_bindings": BINDING_KEYS,
    "list_connections": ("user", "peer_host", "peer_port", "state"),
    "list_channels": ("pid", "user", "consumer_count", "messages_unacknowledged"),
    "list_consumers": ("queue_name", "channel_pid", "consumer_tag", "ack_required",
                       "prefetch_count", "active", "arguments"),
}
SERVED = {"list_queues": QUEUE_KEYS, "list_exchanges": EXCHANGE_KEYS,
          "list_bindings": BINDING_KEYS, "list_connections": CONNECTION_KEYS,
          "list_channels": CHANNEL_KEYS, "list_consumers": CONSUMER_KEYS}
# Text for a missing value where rabbitmqctl prints an empty cell (policy, tags).
EMPTY = ""


def columns_for(command: str, asked: list[str] | None) -> tuple[str, ...]:
    """The columns to show; unknown keys are refused as rabbitmqctl refuses them."""
    if not asked:
        return DEFAULTS[command]
    wanted = [c.strip() for a in asked for c in a.split(",") if c.strip()]
    bad = [c for c in wanted if c not in SERVED[command]]
    if bad:
        raise AccountError(f"Info key(s) {','.join(bad)} are not supported", EX_USAGE)
    return tuple(wanted)


def _rows(records: list[dict[str, Any]], columns: tuple[str, ...]) -> list[dict[str, Any]]:
    return [{c: r.get(c) for c in columns} for r in records]


def _queue_row(queue: Any, held: HeldBytes) -> dict[str, Any]:
    row = inventory.queue_record(queue, held)
    row["policy"] = row["policy"] or EMPTY
    row["exclusive_consumer_tag"] = row["exclusive_consumer_tag"] or EMPTY
    row["head_message_timestamp"] = row["head_message_timestamp"] or EMPTY
    return row


def _exchange_row(vhost: Any, exchange: Any) -> dict[str, Any]:
    row = inventory.exchange_record(exchange)
    policy = vhost.policies.for_exchange(exchange.name) if vhost.policies else None
    row["policy"] = policy.name if policy else EMPTY
    return row


def _binding_row(b: dict[str, Any]) -> dict[str, Any]:
    return {"source_name": b["source"], "source_kind": "exchange",
            "destination_name": b["destination"], "destination_kind": b["destination_type"],
            "routing_key": b["routing_key"], "arguments": b["arguments"]}


def _connection_row(conn: Any) -> dict[str, Any]:
    row = inventory.connection_record(conn)
    row["pid"] = row["name"]
    return row


def _channel_row(channel: Any) -> dict[str, Any]:
    row = inventory.channel_record(channel)
    row["pid"] = row["name"]
    row["connection"] = row["connection_details"]["name"]
    return row


def _consumer_row(consumer: Any) -> dict[str, Any]:
    row = inventory.consumer_record(consumer)
    row["queue_name"] = row["queue"]["name"]
    row["channel_pid"] = row["channel_details"]["name"]
    return row


def commands(broker: Any) -> dict[str, Command]:
    def vhost_of(r: dict[str, Any]) -> Any:
        name = str(r.get("vhost", "/"))
        vhost = broker.vhosts.get(name)
        if vhost is None:
            raise AccountError(f"Virtual host '{name}' does not exist", EX_UNAVAILABLE)
        return vhost

    def listing(command: str, records: Callable[[Any], list[dict[str, Any]]],
                scoped: bool = True) -> Command:
        """A list command; an unknown vhost lists nothing (exit 0), as rabbitmqctl's.
        Unscoped ones (connections, channels) list the node's whatever -p says."""
        def run(r: dict[str, Any]) -> list[dict[str, Any]]:
            columns = columns_for(command, r.get("columns"))
            vhost = broker.vhosts.get(str(r.get("vhost", "/"))) if scoped else None
            if scoped and vhost is None:
                return []
            return _rows(records(vhost), columns)
        return run

    def queue_rows(vhost: Any) -> list[dict[str, Any]]:
        held = inventory.held_bytes(broker)  # unacked bytes: one pass for the whole list
        return [_queue_row(q, held) for q in sorted(vhost.queues.values(), key=lambda q: q.name)]

    def queue_named(r: dict[str, Any], missing: str) -> Any:
        vhost = vhost_of(r)
        try:
            return vhost, vhost.queue_for(str(r["queue"]), None)  # 405 for exclusive ones
        except ChannelError as exc:
            if exc.code == NOT_FOUND:
                raise AccountError(missing, EX_UNAVAILABLE) from None
            raise AccountError(exc.detail, EX_USAGE) from None

    def purge_queue(r: dict[str, Any]) -> int:
        vhost, queue = queue_named(r, "not_found")
        try:
            return int(vhost.purge_queue(queue))
        except ConnectionError_ as exc:  # a stream: AMQP's 540, an error here
            raise AccountError(exc.detail, EX_USAGE) from None

    def delete_queue(r: dict[str, Any]) -> int:
        vhost, queue = queue_named(r, "Queue not found")
        try:
            return int(vhost.delete_queue_checked(queue, bool(r.get("if_unused")),
                                                  bool(r.get("if_empty"))))
        except ChannelError as exc:
            if exc.code == PRECONDITION_FAILED:
                text = "Queue is in use" if exc.detail.endswith("in use") else "Queue is not empty"
                raise AccountError(text, EX_USAGE) from None
            raise

    def close_connection(r: dict[str, Any]) -> None:
        conn = inventory.find_connection(broker, str(r["name"]))
        if conn is None:
            raise AccountError(f"no connection named '{r['name']}' (see list_connections)",
                               EX_UNAVAILABLE)
        inventory.close_connection(conn, str(r["reason"]))

    def close_all_connections(r: dict[str, Any]) -> int:
        vhost = None if r.get("global") else vhost_of(r)
        conns = inventory.open_connections(broker, vhost)
        limit = r.get("limit")
        if limit is not None:
            conns = conns[:int(limit)]
        for conn in conns:
            inventory.close_connection(conn, str(r["reason"]))
        return len(conns)

    def status(r: dict[str, Any]) -> dict[str, Any]:
        return inventory.status_record(broker)

    return {
        "list_queues": listing("list_queues", queue_rows),
        "list_exchanges": listing("list_exchanges", lambda vh: [
            _exchange_row(vh, x) for x in sorted(vh.exchanges.values(), key=lambda x: x.name)]),
        "list_bindings": listing("list_bindings", lambda vh: [
            _binding_row(b) for b in inventory.vhost_bindings(vh)]),
        "list_connections": listing("list_connections", lambda _: [
            _connection_row(c) for c in inventory.open_connections(broker)], scoped=False),
        "list_channels": listing("list_channels", lambda _: [
            _channel_row(ch) for ch in inventory.channels_of(inventory.open_connections(broker))],
            scoped=False),
        "list_consumers": listing("list_consumers", lambda vh: [
            _consumer_row(c) for c in inventory.vhost_consumers([vh])]),
        "purge_queue": purge_queue,
        "delete_queue": delete_queue,
        "close_connection": close_connection,
        "close_all_connections": close_all_connections,
        "export_definitions": lambda r: definitions.export(broker),
        "status": status,
    }
