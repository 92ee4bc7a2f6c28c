"""A batch of sink rows as their publish frames: the two encoders the publisher chooses from.

:func:`arrow_encoder` takes the usual batch (no property column but ``message_id``,
bodies that fit one frame) and has Arrow lay its frames out in one buffer
(:mod:`.arrow_frames`); :func:`general_encoder` takes any batch, row by row in
Python (:func:`.wire.encode_publishes`), and is the other's oracle in the tests.
Both give a function from a run of rows to their frames as one buffer, so the
publisher can cut a batch wherever its confirm window says.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pamqp import encode as pencode

from . import arrow_frames, wire
from .amqp_client import CHANNEL, Connection
from .schema import SINK_PROPERTY_COLUMNS, headers_from_json

if TYPE_CHECKING:
    from .publisher import PublishOptions

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")
_FLAGS = {name: (flag, kind) for name, flag, kind in wire.PROPERTY_FLAGS}
_PERSISTENT = _U8.pack(2)
_LENGTH_BYTE = [bytes((n,)) for n in range(256)]
_MESSAGE_ID_FLAG = _FLAGS["message_id"][0]
_DELIVERY_MODE_FLAG = _FLAGS["delivery_mode"][0]
Encoder = Callable[[int, int], bytes | memoryview]  # rows start..stop -> their frames


def _encode_props(
    columns: list[tuple[int, str, list[Any]]], row: int, persistent: bool, message_id: str | None
) -> bytes:
    flags = 0
    parts: list[bytes] = []
    for flag, kind, values in columns:  # in wire order; message_id and delivery mode inline
        if kind == "dm":
            if persistent:
                flags |= flag
                parts.append(_PERSISTENT)
            continue
        value = message_id if kind == "mid" else values[row]
        if value is None:
            continue
        flags |= flag
        if kind == "s" or kind == "mid":
            raw = value.encode() if isinstance(value, str) else bytes(value)
            parts.append(_U8.pack(len(raw)) + raw)
        elif kind == "o":
            parts.append(_U8.pack(value))
        elif kind == "T":
            stamp: Any = value  # a datetime from an Arrow timestamp column
            parts.append(_U64.pack(int(stamp.timestamp())))
        else:  # headers: (key, value) pairs from an Arrow map, or a JSON object string
            table: Any = headers_from_json(value) if isinstance(value, str) else dict(value)
            parts.append(pencode.field_table(table))
    return _U16.pack(flags) + b"".join(parts)


def general_encoder(conn: Connection, batch: pa.RecordBatch, options: PublishOptions,
                    id_prefix: str, first_index: int) -> Encoder:
    """Any batch: each row's pieces by :func:`.wire.encode_publishes`, joined per chunk."""
    bodies = _bodies(batch.column(batch.schema.names.index("body")))
    props = _properties(batch, options, id_prefix, first_index)
    prefixes = _method_frames(conn, batch, options)
    frame_max = conn.frame_max

    def encode(start: int, stop: int) -> bytes:
        return b"".join(wire.encode_publishes(
            prefixes if isinstance(prefixes, bytes) else prefixes[start:stop], CHANNEL,
            props[start:stop], bodies[start:stop], frame_max))

    return encode


def arrow_encoder(conn: Connection, batch: pa.RecordBatch, options: PublishOptions,
                   id_prefix: str, first_index: int) -> Encoder | None:
    """The usual batch (no property but ``message_id``, bodies of one frame) laid out by
    Arrow (:mod:`.arrow_frames`); None for any other."""
    names = batch.schema.names
    if any(name in names for name in SINK_PROPERTY_COLUMNS if name != "message_id"):
        return None
    body = batch.column(names.index("body"))
    if body.null_count:
        return None
    if pa.types.is_string(body.type) or pa.types.is_large_string(body.type):
        body = body.cast(pa.large_binary() if pa.types.is_large_string(body.type)
                         else pa.binary())
    ids = _arrow_ids(batch, id_prefix, first_index)
    if ids is None:
        return None
    prefixes = _method_frames(conn, batch, options)
    method = prefixes if isinstance(prefixes, bytes) else pa.array(prefixes, pa.binary())
    frames = arrow_frames.frames_of(method, CHANNEL, ids, body, options.persistent,
                                    conn.frame_max)
    if frames is None:
        return None
    _validity, offsets_buffer, data_buffer = frames.buffers()
    data = memoryview(data_buffer)
    offsets = memoryview(offsets_buffer).cast("q" if frames.type == pa.large_binary() else "i")
    first = frames.offset  # 0 for a fresh array; said, not assumed

    def encode(start: int, stop: int) -> memoryview:
        return data[offsets[first + start] : offsets[first + stop]]

    return encode


def _arrow_ids(batch: pa.RecordBatch, id_prefix: str, first_index: int) -> pa.Array | None:
    """The rows' message ids as a binary column: their own, else ``<prefix><index>``;
    None if the column is not text."""
    rows = batch.num_rows
    names = batch.schema.names
    own = batch.column(names.index("message_id")) if "message_id" in names else None
    if own is not None and own.null_count == rows:
        own = None
    if own is not None and not (pa.types.is_string(own.type)
                                or pa.types.is_large_string(own.type)):
        return None
    ids: pa.Array | None = None
    if own is None or own.null_count:
        numbers = pa.array(range(first_index, first_index + rows), pa.int64()).cast(pa.string())
        ids = pc.binary_join_element_wise(pa.scalar(id_prefix), numbers, pa.scalar(""))
    if own is not None:
        ids = own if ids is None else pc.coalesce(own.cast(pa.string()), ids)
    assert ids is not None
    ids = ids.cast(pa.binary())
    lengths = pc.binary_length(ids)
    if pc.max(lengths).as_py() > 255:
        longest = ids[pc.index(lengths, pc.max(lengths)).as_py()].as_py()
        raise ValueError(
            f"message_id longer than 255 bytes: {longest.decode(errors='replace')[:40]!r}...")
    return ids


def _bodies(column: pa.Array) -> list[bytes]:
    """A ``body`` column as bytes per row: strings as UTF-8 (Arrow's cast keeps the
    buffers), nulls as empty bodies."""
    if pa.types.is_string(column.type):
        column = column.cast(pa.binary())
    elif pa.types.is_large_string(column.type):
        column = column.cast(pa.large_binary())
    if column.null_count:
        column = pc.fill_null(column, pa.scalar(b"", column.type))
    values: list[bytes] = column.to_pylist()
    return values


def _method_frames(conn: Connection, batch: pa.RecordBatch, options: PublishOptions
                   ) -> bytes | list[bytes]:
    """The Basic.Publish frame of every row: one for all when they share a routing key."""
    exchange, mandatory, default_rk = options.exchange, options.mandatory, options.routing_key
    if not options.routing_key_column:
        return conn.publish_prefix(exchange, default_rk, mandatory)
    column = batch.column(batch.schema.names.index(options.routing_key_column))
    distinct = pc.unique(column)
    if len(distinct) == 1:  # the usual case: one key for the batch
        key = distinct[0].as_py()
        return conn.publish_prefix(exchange, default_rk if key is None else str(key), mandatory)
    keys = column.to_pylist()
    frames = {key: conn.publish_prefix(exchange, default_rk if key is None else str(key),
                                       mandatory) for key in set(keys)}
    if len(frames) == 1:
        return next(iter(frames.values()))
    return [frames[key] for key in keys]


def _properties(batch: pa.RecordBatch, options: PublishOptions, id_prefix: str,
                first_index: int) -> list[bytes]:
    """Each row's property bytes (flags and list). A row whose only varying property is
    its ``message_id`` (what a source row carries, or the generated id) gets them from a
    precomputed prefix, without walking the property table."""
    names = batch.schema.names
    rows = batch.num_rows
    present = {n: batch.column(names.index(n)).to_pylist() for n in SINK_PROPERTY_COLUMNS
               if n in names}
    ids: list[str] | None = present.get("message_id")
    if ids is None:
        ids = [f"{id_prefix}{first_index + row}" for row in range(rows)]
    elif None in ids:  # a row without its own id gets the generated one
        ids = [f"{id_prefix}{first_index + row}" if own is None else own
               for row, own in enumerate(ids)]
    persistent = options.persistent
    if all(name == "message_id" for name in present):  # message_id and delivery mode only
        raws = [mid.encode() for mid in ids]
        longest = max(raws, key=len)
        if len(longest) > 255:
            raise ValueError(
                f"message_id longer than 255 bytes: {longest.decode()[:40]!r}...")
        head = _U16.pack(_MESSAGE_ID_FLAG | (_DELIVERY_MODE_FLAG if persistent else 0)) + (
            _PERSISTENT if persistent else b"")
        length = _LENGTH_BYTE
        return [head + length[len(raw)] + raw for raw in raws]
    columns: list[tuple[int, str, list[Any]]] = []
    for name, flag, kind in wire.PROPERTY_FLAGS:
        if name == "delivery_mode":
            columns.append((flag, "dm", []))
        elif name == "message_id":
            columns.append((flag, "mid", []))
        elif name in present:
            columns.append((flag, kind, present[name]))
    return [_encode_props(columns, row, persistent, ids[row]) for row in range(rows)]
