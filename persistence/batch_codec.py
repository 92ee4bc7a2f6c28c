"""A ``batch.Batch`` as bytes and back: the frame a leader will send its followers.

Layout (big-endian): ``u64 seq, u64 next_msg_id, u64 next_qid, u32 op count``,
then per live operation a tag byte and its fields. Cancelled operations are
left out (they change nothing). A message is carried once per batch, with
its first ``Enqueue``; later entries of the same message refer to its id.
Definitions are their JSON record (``records.encode_definition``). Pure
functions: no store, no I/O.
"""

from __future__ import annotations

import json
import struct

from leveret.model.message import Message
from leveret.persistence.batch import (
    Batch,
    DedupeAppend,
    DeleteDefinition,
    DeleteExchange,
    DeleteQueue,
    DeliveredBelow,
    DropDedupe,
    Enqueue,
    MarkDelivered,
    Op,
    Purge,
    PutDefinition,
    Remove,
    Truncate,
)
from leveret.persistence.records import (
    decode_definition,
    decode_message,
    encode_definition,
    encode_message,
)

_HEAD = struct.Struct(">QQQI")
_ENQUEUE = struct.Struct(">IQQIBQ")  # qid, seq, msg id, delivery count, flags, expires_at
_ENTRY = struct.Struct(">IQ")  # qid, seq
_DELIVERED = struct.Struct(">IQI")
_LEN = struct.Struct(">I")
_DEDUPE = struct.Struct(">QQI")  # first, floor, key count; then per key: blob, u64 expires
_WITH_MESSAGE, _TRANSIENT = 1, 2
(_T_ENQUEUE, _T_DELIVERED, _T_REMOVE, _T_PURGE, _T_DELETE_QUEUE, _T_DELETE_EXCHANGE,
 _T_PUT_DEF, _T_DELETE_DEF, _T_DELIVERED_BELOW, _T_DEDUPE_APPEND, _T_DROP_DEDUPE,
 _T_TRUNCATE) = range(1, 13)
_U64 = struct.Struct(">Q")


def _blob(data: bytes) -> bytes:
    return _LEN.pack(len(data)) + data


def _json(value: object) -> bytes:
    return _blob(json.dumps(value, separators=(",", ":")).encode("utf-8", "surrogatepass"))


def encode_batch(batch: Batch) -> bytes:
    parts: list[bytes] = []
    sent: set[int] = set()
    count = 0
    for op in batch.ops:
        if isinstance(op, Enqueue):
            if op.cancelled:
                continue
            msg_id = op.message.store_id
            flags = _TRANSIENT if op.transient else 0
            if msg_id not in sent:
                sent.add(msg_id)
                flags |= _WITH_MESSAGE
            parts.append(bytes((_T_ENQUEUE,)) + _ENQUEUE.pack(
                op.qid, op.seq, msg_id, op.delivery_count, flags, op.expires_at))
            if flags & _WITH_MESSAGE:
                parts.append(_blob(encode_message(op.message)))
        elif isinstance(op, MarkDelivered):
            if op.cancelled:
                continue
            parts.append(bytes((_T_DELIVERED,)) + _DELIVERED.pack(op.qid, op.seq,
                                                                  op.delivery_count))
        elif isinstance(op, DeliveredBelow):
            if op.cancelled:
                continue
            parts.append(bytes((_T_DELIVERED_BELOW,)) + _ENTRY.pack(op.qid, op.below))
        elif isinstance(op, Remove):
            parts.append(bytes((_T_REMOVE,)) + _ENTRY.pack(op.qid, op.seq))
        elif isinstance(op, Purge):
            parts.append(bytes((_T_PURGE,)) + _ENTRY.pack(op.qid, op.from_seq))
        elif isinstance(op, Truncate):
            parts.append(bytes((_T_TRUNCATE,)) + _ENTRY.pack(op.qid, op.below))
        elif isinstance(op, DeleteQueue):
            parts.append(bytes((_T_DELETE_QUEUE,)) + _json([op.vhost, op.name, op.qid]))
        elif isinstance(op, DeleteExchange):
            parts.append(bytes((_T_DELETE_EXCHANGE,)) + _json([op.vhost, op.name]))
        elif isinstance(op, PutDefinition):
            parts.append(bytes((_T_PUT_DEF,)) + _blob(encode_definition(op.definition)))
        elif isinstance(op, DeleteDefinition):
            parts.append(bytes((_T_DELETE_DEF,)) + _json([op.kind, list(op.identity)]))
        elif isinstance(op, DedupeAppend):
            parts.append(bytes((_T_DEDUPE_APPEND,)) + _blob(op.scope)
                         + _DEDUPE.pack(op.first, op.floor, len(op.keys)))
            parts.extend(_blob(key) + _U64.pack(expires)
                         for key, expires in zip(op.keys, op.expires, strict=True))
        elif isinstance(op, DropDedupe):
            parts.append(bytes((_T_DROP_DEDUPE,)) + _blob(op.scope))
        else:
            raise TypeError(f"unknown store operation {op!r}")
        count += 1
    head = _HEAD.pack(batch.seq, batch.next_msg_id, batch.next_qid, count)
    return b"".join((head, *parts))


def decode_batch(data: bytes) -> Batch:
    """The inverse of ``encode_batch``; raises ValueError (or struct.error) if malformed."""
    view = memoryview(data)
    seq, next_msg_id, next_qid, count = _HEAD.unpack_from(view, 0)
    at = _HEAD.size
    ops: list[Op] = []
    messages: dict[int, Message] = {}

    def blob() -> memoryview:
        nonlocal at
        (size,) = _LEN.unpack_from(view, at)
        at += _LEN.size
        if at + size > len(view):
            raise ValueError("batch truncated")
        out = view[at:at + size]
        at += size
        return out

    def doc() -> list[object]:
        value = json.loads(bytes(blob()).decode("utf-8", "surrogatepass"))
        if not isinstance(value, list):
            raise ValueError("malformed batch operation")
        return value

    for _ in range(count):
        tag = view[at]
        at += 1
        if tag == _T_ENQUEUE:
            qid, entry_seq, msg_id, deliveries, flags, expires_at = _ENQUEUE.unpack_from(view, at)
            at += _ENQUEUE.size
            if flags & _WITH_MESSAGE:
                messages[msg_id] = decode_message(blob(), msg_id)
            message = messages.get(msg_id)
            if message is None:
                raise ValueError(f"batch refers to message {msg_id} before carrying it")
            ops.append(Enqueue(qid, entry_seq, message, deliveries, bool(flags & _TRANSIENT),
                               False, expires_at))
        elif tag == _T_DELIVERED:
            qid, entry_seq, deliveries = _DELIVERED.unpack_from(view, at)
            at += _DELIVERED.size
            ops.append(MarkDelivered(qid, entry_seq, deliveries))
        elif tag in (_T_REMOVE, _T_PURGE, _T_DELIVERED_BELOW, _T_TRUNCATE):
            qid, entry_seq = _ENTRY.unpack_from(view, at)
            at += _ENTRY.size
            ops.append(Remove(qid, entry_seq) if tag == _T_REMOVE else Purge(qid, entry_seq)
                       if tag == _T_PURGE else Truncate(qid, entry_seq) if tag == _T_TRUNCATE
                       else DeliveredBelow(qid, entry_seq))
        elif tag == _T_DELETE_QUEUE:
            vhost, name, qid = doc()
            ops.append(DeleteQueue(str(vhost), str(name), int(qid)))  # type: ignore[call-overload]
        elif tag == _T_DELETE_EXCHANGE:
            vhost, name = doc()
            ops.append(DeleteExchange(str(vhost), str(name)))
        elif tag == _T_PUT_DEF:
            ops.append(PutDefinition(decode_definition(bytes(blob()))))
        elif tag == _T_DELETE_DEF:
            kind, identity = doc()
            ops.append(DeleteDefinition(str(kind), tuple(identity)))  # type: ignore[arg-type]
        elif tag == _T_DEDUPE_APPEND:
            scope = bytes(blob())
            first, floor, n = _DEDUPE.unpack_from(view, at)
            at += _DEDUPE.size
            op = DedupeAppend(scope, first, floor=floor)
            for _ in range(n):
                op.keys.append(bytes(blob()))
                op.expires.append(_U64.unpack_from(view, at)[0])
                at += _U64.size
            ops.append(op)
        elif tag == _T_DROP_DEDUPE:
            ops.append(DropDedupe(bytes(blob())))
        else:
            raise ValueError(f"unknown batch operation tag {tag}")
    if at != len(view):
        raise ValueError("trailing bytes after the batch")
    return Batch(ops, next_msg_id, next_qid, len(ops), seq)
