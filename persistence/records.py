"""Byte layouts of what the store keeps on disk (pure functions, no storage API).

Messages and queue entries are on the hot path, so they are fixed ``struct``
layouts (big-endian, so LMDB's byte order is numeric order):

* message record: ``u16 exchange_len, u16 routing_key_len, u32 props_len``,
  then exchange, routing key, the publisher's raw property bytes and the body
  (its length is what remains). Names are UTF-8 with ``surrogateescape`` so
  encoding can never fail inside a write transaction.
* queue index key: ``u32 qid, u64 seq``; value: ``u64 message id,
  u32 delivery count, u8 flags``, followed (format version 2, flag
  ``FLAG_EXPIRES``) by ``u64 expires_at``: the entry's TTL expiry in absolute
  wall-clock ms. Entries without a TTL keep the 13-byte version 1 layout, so
  a version 1 store is a valid version 2 store.

Definitions are rare and small, so they are JSON; field-table values (AMQP
arguments) go through a tagged encoding that keeps every type pamqp decodes
(bytes vs bytearray, Decimal, datetime with or without tz, float bit-exact).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import hashlib
import json
import struct
from typing import Any, TypeAlias

from leveret.persistence.store import (
    AccessDef,
    BindingDef,
    ExchangeDef,
    PolicyDef,
    QueueDef,
    StoreError,
)
from leveret.model.message import Message

U32 = struct.Struct(">I")
U64 = struct.Struct(">Q")
INDEX_KEY = struct.Struct(">IQ")
INDEX_VALUE = struct.Struct(">QIB")
COUNTER = struct.Struct(">QQ")  # entry count, next seq (one past the highest ever stored)
_MESSAGE_HEAD = struct.Struct(">HHI")

FLAG_TRANSIENT = 1
FLAG_EXPIRES = 2  # a u64 expires_at follows the fixed INDEX_VALUE part


def encode_index_value(msg_id: int, delivery_count: int, flags: int, expires_at: int) -> bytes:
    """Index value; ``FLAG_EXPIRES`` is derived from ``expires_at`` (0 = never)."""
    if expires_at:
        return INDEX_VALUE.pack(msg_id, delivery_count, flags | FLAG_EXPIRES) + U64.pack(expires_at)
    return INDEX_VALUE.pack(msg_id, delivery_count, flags & ~FLAG_EXPIRES)


def decode_index_value(value: bytes | memoryview) -> tuple[int, int, int, int]:
    """(message id, delivery count, flags, expires_at or 0)."""
    msg_id, deliveries, flags = INDEX_VALUE.unpack_from(value, 0)
    expires_at = U64.unpack_from(value, INDEX_VALUE.size)[0] if flags & FLAG_EXPIRES else 0
    return msg_id, deliveries, flags, expires_at


# -- messages -------------------------------------------------------------------

def encode_message(message: Message) -> bytes:
    exchange = message.exchange.encode("utf-8", "surrogateescape")
    routing_key = message.routing_key.encode("utf-8", "surrogateescape")
    props = message.raw_properties
    head = _MESSAGE_HEAD.pack(len(exchange), len(routing_key), len(props))
    return b"".join((head, exchange, routing_key, props, message.body))


def decode_message(record: bytes | memoryview, store_id: int) -> Message:
    exchange_len, routing_key_len, props_len = _MESSAGE_HEAD.unpack_from(record, 0)
    at = _MESSAGE_HEAD.size
    # str(buffer, ...) also takes a memoryview (an LMDB read with buffers=True).
    exchange = str(record[at:at + exchange_len], "utf-8", "surrogateescape")
    at += exchange_len
    routing_key = str(record[at:at + routing_key_len], "utf-8", "surrogateescape")
    at += routing_key_len
    props = bytes(record[at:at + props_len])
    message = Message(exchange, routing_key, props, bytes(record[at + props_len:]))
    message.store_id = store_id
    return message


# -- field tables (tagged JSON) ----------------------------------------------------
# Plain JSON is used where it is lossless (str, bool, None, int, list); everything
# else is a one-key object whose key is the tag. Dicts are always tagged, so a
# table whose only key happens to be a tag name cannot be misread.

def encode_value(value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return {"f": value.hex()}
    if isinstance(value, bytearray):
        return {"ba": base64.b64encode(value).decode("ascii")}
    if isinstance(value, (bytes, memoryview)):
        return {"b": base64.b64encode(value).decode("ascii")}
    if isinstance(value, decimal.Decimal):
        return {"d": str(value)}
    if isinstance(value, datetime.datetime):
        return {"t": value.isoformat()}
    if isinstance(value, (list, tuple)):
        return [encode_value(v) for v in value]
    if isinstance(value, dict):
        return {"m": {str(k): encode_value(v) for k, v in value.items()}}
    raise TypeError(f"cannot store a field value of type {type(value).__name__}")


def decode_value(value: Any) -> Any:
    if isinstance(value, list):
        return [decode_value(v) for v in value]
    if not isinstance(value, dict):
        return value
    ((tag, payload),) = value.items()
    if tag == "m":
        return {k: decode_value(v) for k, v in payload.items()}
    if tag == "f":
        return float.fromhex(payload)
    if tag == "b":
        return base64.b64decode(payload)
    if tag == "ba":
        return bytearray(base64.b64decode(payload))
    if tag == "d":
        return decimal.Decimal(payload)
    if tag == "t":
        return datetime.datetime.fromisoformat(payload)
    raise ValueError(f"unknown field value tag {tag!r}")


def _table(arguments: dict[str, Any]) -> Any:
    return encode_value(arguments)["m"]


def _untable(encoded: Any) -> dict[str, Any]:
    result: dict[str, Any] = decode_value({"m": encoded})
    return result


# -- definitions -----------------------------------------------------------------------

Definition: TypeAlias = ExchangeDef | QueueDef | BindingDef | PolicyDef | AccessDef


def binding_identity(b: BindingDef) -> tuple[str, ...]:
    """What makes two bindings the same one (RabbitMQ: source, destination, key, arguments)."""
    try:
        args = json.dumps(_table(b.arguments), sort_keys=True, separators=(",", ":"))
    except TypeError as exc:
        raise StoreError(f"cannot store {b!r}: {exc}") from exc
    return (b.vhost, b.source, b.destination, b.destination_type, b.routing_key, args)


def definition_key(kind: str, identity: tuple[str, ...]) -> bytes:
    """LMDB keys are capped at 511 bytes, so identities are hashed (kind byte + 20 bytes)."""
    digest = hashlib.blake2b(json.dumps(identity).encode(), digest_size=20).digest()
    return kind.encode("ascii") + digest


def encode_definition(d: Definition) -> bytes:
    """JSON with a kind tag; raises StoreError for an argument value that cannot be stored."""
    try:
        if isinstance(d, ExchangeDef):
            doc: dict[str, Any] = {"kind": "x", "vhost": d.vhost, "name": d.name, "type": d.type,
                                   "durable": d.durable, "auto_delete": d.auto_delete,
                                   "internal": d.internal, "arguments": _table(d.arguments)}
        elif isinstance(d, PolicyDef):
            # The definition is plain JSON already (it came from JSON); no tagging.
            doc = {"kind": "p", "vhost": d.vhost, "name": d.name, "pattern": d.pattern,
                   "apply_to": d.apply_to, "definition": d.definition, "priority": d.priority}
        elif isinstance(d, AccessDef):  # plain JSON, like a policy
            doc = {"kind": "a", "access": d.kind, "key": list(d.key), "record": d.record}
        elif isinstance(d, QueueDef):
            doc = {"kind": "q", "vhost": d.vhost, "name": d.name, "durable": d.durable,
                   "auto_delete": d.auto_delete, "arguments": _table(d.arguments), "qid": d.qid}
        else:
            doc = {"kind": "b", "vhost": d.vhost, "source": d.source,
                   "destination": d.destination, "destination_type": d.destination_type,
                   "routing_key": d.routing_key, "arguments": _table(d.arguments)}
    except TypeError as exc:
        raise StoreError(f"cannot store {type(d).__name__} {d!r}: {exc}") from exc
    return json.dumps(doc, separators=(",", ":")).encode("utf-8", "surrogatepass")


def decode_definition(raw: bytes) -> Definition:
    doc = json.loads(bytes(raw).decode("utf-8", "surrogatepass"))
    kind = doc.pop("kind")
    if kind == "p":
        return PolicyDef(**doc)
    if kind == "a":
        return AccessDef(doc["access"], tuple(doc["key"]), doc["record"])
    doc["arguments"] = _untable(doc["arguments"])
    if kind == "x":
        return ExchangeDef(**doc)
    if kind == "q":
        return QueueDef(**doc)
    if kind == "b":
        return BindingDef(**doc)
    raise ValueError(f"unknown definition kind {kind!r}")
