"""Byte layouts of what the store keeps on disk (pure functions, no storage API).

Messages and queue entries are on the hot path, so they are fixed ``struct``
layouts (big-endian, so LMDB's byte order is numeric order):

* message record: ``u16 exchange_len, u16 routing_key_len, u32 props_len``,
  then exchange, routing key, the publisher's raw property bytes and the body
  (its length is what remains). Names are UTF-8 with ``surrogateescape`` so
  encoding can never fail inside a write transaction.
* queue index key: ``u32 qid, u64 seq``; value: ``u64 message id,
  u32 delivery count, u8 flags``, followed (format version 3, flag
  ``FLAG_SIZED``) by ``u32 body size`` and (format version 2, flag
  ``FLAG_EXPIRES``) by ``u64 expires_at``: the entry's TTL expiry in absolute
  wall-clock ms. Each field is there only when its flag is set, so a version 1
  or 2 store is a valid version 3 store (its entries' sizes are not known).
* per-queue counter: ``u64 entries, u64 next seq, u64 body bytes, u64
  transient entries, u64 their body bytes, u64 delivered below``
  (``decode_counter``). The body size in each index value is what lets a
  removal keep the byte totals without reading the message record. Entries
  with a seq under "delivered below" count as delivered at least once
  (``batch.DeliveredBelow``). Version 2 wrote only the first two fields,
  versions 3 and 4 the first five.

* deduplication window run: key ``scope`` (8 bytes, ``dedupe_scope``) then the ``u64
  order`` (place in its FIFO window) of the run's last key, so that a window's new runs are
  appended and its evictions are whole runs at its start (``encode_dedupe_runs``); value
  ``u8 tag`` (``DEDUPE_RUN`` or ``DEDUPE_RUN_TIMED``), ``u32 count``, a ``u16`` length
  per key, a ``u64 expires_at`` per key (wall-clock ms, 0 = until evicted; timed runs
  only), then the typed keys (``model/dedupe.dedupe_key``) back to back. The key
  ``scope`` alone holds the window's ``u64 floor``: keys placed below it are evicted,
  also those of the run the floor cuts. Before runs, each key had a record of its own
  (key: its order; value: ``u64 expires_at`` then the key, so its first byte is 0):
  still read.

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

from leveret.model.message import Message
from leveret.persistence.store import (
    AccessDef,
    BindingDef,
    ExchangeDef,
    PolicyDef,
    QueueDef,
    StoreError,
)

try:  # Compiled, ``cython.compiled`` is true at compile time; pure, Cython's shadow says False.
    import cython

    COMPILED: bool = cython.compiled
except ImportError:  # pure Python without Cython installed
    COMPILED = False

U32 = struct.Struct(">I")
U64 = struct.Struct(">Q")
INDEX_KEY = struct.Struct(">IQ")
INDEX_VALUE = struct.Struct(">QIB")
INDEX_SIZED = struct.Struct(">QIBI")  # INDEX_VALUE and the body size (FLAG_SIZED)
# Entry count, next seq (one past the highest ever stored), body bytes (UNKNOWN: see
# decode_counter), transient entries and their body bytes, delivered below (format 5).
COUNTER = struct.Struct(">QQQQQQ")
COUNTER_V2 = struct.Struct(">QQ")  # format 2: entry count, next seq
COUNTER_V3 = struct.Struct(">QQQQQ")  # formats 3 and 4: no delivered mark
UNKNOWN = 0xFFFF_FFFF_FFFF_FFFF  # a byte total that is not known
MESSAGE_HEAD = struct.Struct(">HHI")
DEDUPE_SCOPE_BYTES = 8

FLAG_TRANSIENT = 1
FLAG_EXPIRES = 2  # a u64 expires_at follows the fixed part (and the size, if any)
FLAG_SIZED = 4  # a u32 body size follows the fixed INDEX_VALUE part (format 3)
_NOT_EXPIRES = ~FLAG_EXPIRES
_NOT_SIZED = ~FLAG_SIZED
_SIZED_EXPIRES = FLAG_SIZED | FLAG_EXPIRES


def encode_index_value(msg_id: int, delivery_count: int, flags: int, expires_at: int,
                       size: int | None) -> bytes:
    """Index value; ``FLAG_EXPIRES`` is derived from ``expires_at`` (0 = never) and
    ``FLAG_SIZED`` from ``size`` (None: an entry written before format 3 keeps none)."""
    if size is None:
        flags &= _NOT_SIZED
        if expires_at:
            return INDEX_VALUE.pack(msg_id, delivery_count, flags | FLAG_EXPIRES) + U64.pack(
                expires_at)
        return INDEX_VALUE.pack(msg_id, delivery_count, flags & _NOT_EXPIRES)
    if expires_at:
        return INDEX_SIZED.pack(msg_id, delivery_count, flags | _SIZED_EXPIRES, size) + U64.pack(
            expires_at)
    return INDEX_SIZED.pack(msg_id, delivery_count, (flags | FLAG_SIZED) & _NOT_EXPIRES, size)


def decode_index_value(value: bytes | memoryview) -> tuple[int, int, int, int, int | None]:
    """(message id, delivery count, flags, expires_at or 0, body size or None)."""
    if value[12] & FLAG_SIZED:
        msg_id, deliveries, flags, size = INDEX_SIZED.unpack_from(value, 0)
        at: int = INDEX_SIZED.size
    else:
        msg_id, deliveries, flags = INDEX_VALUE.unpack_from(value, 0)
        size, at = None, INDEX_VALUE.size
    expires_at = U64.unpack_from(value, at)[0] if flags & FLAG_EXPIRES else 0
    return msg_id, deliveries, flags, expires_at, size


def decode_counter(raw: bytes | memoryview) -> list[int]:
    """A queue's counter: [entries, next seq, body bytes, transient entries, their body
    bytes, delivered below]. A format 2 record (two fields) knows no byte total:
    ``UNKNOWN`` until the queue is next empty. Transient totals count only entries with a
    size (format 3); the older ones are dropped at the first start of a format 3 store,
    before anything reads. Before format 5 each entry carried its own delivery count, so
    the delivered mark reads as 0."""
    size = len(raw)
    if size == COUNTER_V2.size:
        count, next_seq = COUNTER_V2.unpack(raw)
        return [count, next_seq, UNKNOWN if count else 0, 0, 0, 0]
    if size == COUNTER_V3.size:
        return [*COUNTER_V3.unpack(raw), 0]
    return list(COUNTER.unpack(raw))


DEDUPE_RUN = 1  # run tag: no key expires
DEDUPE_RUN_TIMED = 2  # run tag: a u64 expires_at per key follows the lengths
_RUN_HEAD = struct.Struct(">BI")
# A run's value stays under LMDB's largest in-page node (about 2 KB on 4 KB pages): larger
# values take overflow pages, allocated as contiguous runs from the freelist.
DEDUPE_RUN_BYTES = 1900


def encode_dedupe_runs(scope: bytes, first: int, keys: list[bytes],
                       expires: list[int]) -> tuple[list[bytes], list[bytes]]:
    """A window's keys placed at ``first``, ``first + 1``, ... as run records (keys,
    values): one record written and deleted per run instead of one per key. On the group
    commit's thread, which holds the GIL the event loop needs: compiled, a run is laid out
    by C loops (``_laid_out_run``); pure, by a few C calls (``_joined_run``)."""
    count = len(keys)
    if not count:
        return [], []
    if COMPILED:  # one C loop
        timed = False
        total = 0
        for i in range(count):
            total += len(keys[i])
            if expires[i]:
                timed = True
    else:  # two C calls
        timed = any(expires)
        total = sum(map(len, keys))
    each = total // count + (10 if timed else 2)
    step = max(1, (DEDUPE_RUN_BYTES - _RUN_HEAD.size) // each)
    tag = DEDUPE_RUN_TIMED if timed else DEDUPE_RUN
    out_keys: list[bytes] = []
    out_values: list[bytes] = []
    for at in range(0, count, step):
        end = min(at + step, count)
        out_keys.append(scope + U64.pack(first + end - 1))
        out_values.append(_laid_out_run(keys, expires, at, end, tag) if COMPILED
                          else _joined_run(keys, expires, at, end, tag))
    return out_keys, out_values


def _joined_run(keys: list[bytes], expires: list[int], at: int, end: int, tag: int) -> bytes:
    """The run record of ``keys[at:end]``: its head, the lengths, the expiries if timed,
    the keys (a few C calls, not one a key: the pure build's way)."""
    run = keys[at:end]
    n = len(run)
    parts = [_RUN_HEAD.pack(tag, n), struct.pack(f">{n}H", *map(len, run))]
    if tag == DEDUPE_RUN_TIMED:
        parts.append(struct.pack(f">{n}Q", *expires[at:end]))
    parts += run
    return b"".join(parts)


def _laid_out_run(keys: list[bytes], expires: list[int], at: int, end: int,
                  tag: int) -> bytes:
    """``_joined_run``'s bytes, written byte by byte into one buffer: compiled, C loops
    through pointers (``records.pxd``), no object a key; pure, the same lines index the
    bytearray and the keys."""
    n = end - at
    size = _RUN_HEAD.size + (10 if tag == DEDUPE_RUN_TIMED else 2) * n
    for i in range(at, end):
        size += len(keys[i])
    out = bytearray(size)
    _RUN_HEAD.pack_into(out, 0, tag, n)
    q = out
    pos = _RUN_HEAD.size
    for i in range(at, end):
        length = len(keys[i])
        q[pos] = length >> 8
        q[pos + 1] = length & 0xFF
        pos += 2
    if tag == DEDUPE_RUN_TIMED:
        for i in range(at, end):
            expiry = expires[i]
            for shift in range(56, -8, -8):
                q[pos] = (expiry >> shift) & 0xFF
                pos += 1
    for i in range(at, end):
        key = keys[i]
        length = len(key)
        k = key
        if COMPILED:  # libc's, cimported by the .pxd
            memcpy(q + pos, k, length)  # type: ignore[name-defined,operator]  # noqa: F821
        else:
            q[pos:pos + length] = k
        pos += length
    return bytes(out)


def decode_dedupe_run(last: int, value: bytes) -> list[tuple[bytes, int, int]]:
    """A run record's (key, order, expires_at), oldest first; ``last``: the order in its
    key. A record of one key, as written before runs, too."""
    if value[0] not in (DEDUPE_RUN, DEDUPE_RUN_TIMED):
        return [(bytes(value[8:]), last, U64.unpack_from(value, 0)[0])]
    tag, n = _RUN_HEAD.unpack_from(value, 0)
    at = _RUN_HEAD.size
    lengths = struct.unpack_from(f">{n}H", value, at)
    at += 2 * n
    if tag == DEDUPE_RUN_TIMED:
        expiries: tuple[int, ...] = struct.unpack_from(f">{n}Q", value, at)
        at += 8 * n
    else:
        expiries = (0,) * n
    out = []
    order = last - n + 1
    for length, expires in zip(lengths, expiries, strict=True):
        out.append((bytes(value[at:at + length]), order, expires))
        at += length
        order += 1
    return out


def dedupe_scope(vhost: str, exchange: str) -> bytes:
    """The key prefix of an exchange's deduplication window (a digest: names are long)."""
    return hashlib.blake2b(json.dumps([vhost, exchange]).encode(),
                           digest_size=DEDUPE_SCOPE_BYTES).digest()


# -- messages -------------------------------------------------------------------

def encode_message(message: Message) -> bytes:
    # Names typed ``str`` when compiled (records.pxd): encoding them is a C-API call, not
    # a method lookup and call; the default exchange's empty name is not encoded at all.
    exchange_name: str = message.exchange
    routing_key_name: str = message.routing_key
    exchange = exchange_name.encode("utf-8", "surrogateescape") if exchange_name else b""
    routing_key = routing_key_name.encode("utf-8", "surrogateescape")
    props = message.raw_properties
    head = MESSAGE_HEAD.pack(len(exchange), len(routing_key), len(props))
    return b"".join((head, exchange, routing_key, props, message.body))


def decode_message(record: bytes | memoryview, store_id: int) -> Message:
    exchange_len, routing_key_len, props_len = MESSAGE_HEAD.unpack_from(record, 0)
    at = MESSAGE_HEAD.size
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


KINDS = {ExchangeDef: "x", QueueDef: "q", BindingDef: "b", PolicyDef: "p"}


def definition_identity(d: Definition) -> tuple[str, tuple[str, ...]]:
    """(kind, identity): what a later definition of the same thing replaces."""
    if isinstance(d, BindingDef):
        return "b", binding_identity(d)
    if isinstance(d, AccessDef):
        return "a", (d.kind, *d.key)
    return KINDS[type(d)], (d.vhost, d.name)
