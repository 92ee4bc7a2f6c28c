"""The row schema of the ``leveret`` format, and messages <-> Arrow columns.

A source row is one delivered message::

    body binary, routing_key string, exchange string, message_id string,
    headers map<string,string>, content_type, content_encoding,
    correlation_id, reply_to, expiration, type, user_id, app_id string,
    delivery_mode int, priority int, timestamp timestamp,
    redelivered boolean, seq long

``seq`` is the reader's position for the message (the streaming offset it
belongs to). A user's declared schema (``.schema("body binary, message_id string")``)
selects some of these columns, in its order (:class:`Layout`). Header values
become strings (bytes as UTF-8, numbers and booleans with ``str``), since a
Spark map needs one value type; the sink publishes them
back as AMQP long strings. With the source option ``headersAsJson=true`` the
``headers`` column is instead a ``string`` holding the table as one JSON object
(``{"n": 42, "ratio": 0.5, "ok": true, "tags": ["a"]}``; read it with
``from_json`` or ``get_json_object``), and the sink publishes a string
``headers`` column by parsing it back, so integers, floats, booleans, nulls,
nested tables and arrays keep their types through a round trip. Timestamps and
byte arrays become strings (ISO 8601, UTF-8) and decimals floats: JSON has no
such types.

The sink takes ``body`` (binary or string) plus any of the columns above with
the same names and types (extra columns are ignored, missing ones unset), so a
source DataFrame round-trips through the sink unchanged. Conversion goes
through Arrow in both directions: the reader hands Spark ``RecordBatch``es and
the writers receive them, so no Python ``Row`` is built per message. On the way
in, the driver ships each partition's messages as the frames they were
delivered in (:class:`RawMessages`), decoded into columns on the executor.
"""

from __future__ import annotations

import array
import datetime
import decimal
import json
import struct
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import pyarrow as pa

from . import wire

STRING_PROPERTIES = (
    "content_type",
    "content_encoding",
    "correlation_id",
    "reply_to",
    "expiration",
    "type",
    "user_id",
    "app_id",
)

def schema_ddl(headers_as_json: bool = False) -> str:
    return (
        "body binary, routing_key string, exchange string, message_id string, "
        + ("headers string, " if headers_as_json else "headers map<string,string>, ")
        + ", ".join(f"{name} string" for name in STRING_PROPERTIES)
        + ", delivery_mode int, priority int, timestamp timestamp, redelivered boolean, seq long"
    )


def arrow_schema(headers_as_json: bool = False) -> pa.Schema:
    return pa.schema(
        [
            ("body", pa.binary()),
            ("routing_key", pa.string()),
            ("exchange", pa.string()),
            ("message_id", pa.string()),
            ("headers", pa.string() if headers_as_json else pa.map_(pa.string(), pa.string())),
            *[(name, pa.string()) for name in STRING_PROPERTIES],
            ("delivery_mode", pa.int32()),
            ("priority", pa.int32()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("redelivered", pa.bool_()),
            ("seq", pa.int64()),
        ]
    )


# Spark's name for each column's type (``DataType.simpleString()``), to check a user's schema.
_SPARK_TYPES = {"binary": "binary", "string": "string", "int32": "int", "int64": "bigint",
                "bool": "boolean", "timestamp[us, tz=UTC]": "timestamp",
                "map<string, string>": "map<string,string>"}


class Layout(NamedTuple):
    """What a source row holds: which of the columns, in which order, and the headers' form.

    By default every column of :func:`schema_ddl`. A user who declares a schema
    (``readStream.format("leveret").schema("body binary, message_id string")``) gets
    those columns only: the executor decodes and Spark converts nothing else, which
    is most of the per-row cost of the columns a query drops anyway.
    """

    headers_as_json: bool = False
    columns: tuple[str, ...] | None = None  # None: all of them

    @classmethod
    def of(cls, fields: Sequence[tuple[str, str]] | None, headers_as_json: bool) -> Layout:
        """``fields``: the user's schema as (name, Spark type) pairs, or None (ours).

        Raises ``ValueError`` naming a column we do not have or a type we do not give."""
        full = arrow_schema(headers_as_json)
        if fields is None or [name for name, _ in fields] == full.names:
            return cls(headers_as_json)
        for name, spark_type in fields:
            if name not in full.names:
                raise ValueError(
                    f"the leveret source has no column {name!r}; its columns are: "
                    f"{schema_ddl(headers_as_json)}")
            ours = _SPARK_TYPES[str(full.field(name).type)]
            if spark_type.replace(" ", "") != ours:
                raise ValueError(f"the leveret source's column {name!r} is {ours}, "
                                 f"not {spark_type}")
        return cls(headers_as_json, tuple(name for name, _ in fields))

    def arrow_schema(self) -> pa.Schema:
        full = ARROW_SCHEMA_JSON_HEADERS if self.headers_as_json else ARROW_SCHEMA
        if self.columns is None:
            return full
        return pa.schema([full.field(name) for name in self.columns])


ALL_COLUMNS = Layout()
SCHEMA_DDL = schema_ddl()
ARROW_SCHEMA = arrow_schema()
ARROW_SCHEMA_JSON_HEADERS = arrow_schema(headers_as_json=True)
COLUMNS = tuple(ARROW_SCHEMA.names)
# Columns the sink reads as message properties when present.
SINK_PROPERTY_COLUMNS = ("message_id", *STRING_PROPERTIES, "priority", "timestamp", "headers")
ARROW_BATCH_ROWS = 10000  # rows per RecordBatch handed to Spark


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode(errors="replace")
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    return str(value)


def headers_to_json(table: dict[str, Any]) -> str:
    """An AMQP field table as one JSON object (see the module docstring for the types)."""
    return json.dumps(table, default=_json_default, separators=(",", ":"))


def headers_from_json(text: str) -> dict[str, Any]:
    """Inverse of :func:`headers_to_json`, for a sink row's string ``headers`` column."""
    try:
        table = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"a string headers column must hold a JSON object: {exc}: {text[:80]!r}") from exc
    if not isinstance(table, dict):
        raise ValueError(f"a string headers column must hold a JSON object, got {text[:80]!r}")
    return table


def header_value(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return str(value)


_U64 = struct.Struct(">Q")
_FRAME_HEAD = struct.Struct(">BHI")  # frame type, channel, payload size
_EMPTY_PROPERTIES = b"\x00\x00"
# The properties a source row usually carries (a persistent message with an id, what the
# sink and most publishers send): decoded without the general property walk.
_PERSISTENT_WITH_ID = (wire.PROPERTY_FLAGS[3][1] | wire.PROPERTY_FLAGS[8][1]).to_bytes(2, "big")
_PROPERTY_COLUMNS = ("message_id", *STRING_PROPERTIES, "delivery_mode", "priority", "timestamp",
                     "headers")


class RawMessages:
    """A partition's messages as they were delivered: their frames in one blob.

    The driver only numbers deliveries and ships them (one ``bytes`` to pickle, not
    a Python object per message); :meth:`to_arrow` decodes them on the executor.
    """

    def __init__(self, layout: Layout = ALL_COLUMNS) -> None:
        self.layout = layout
        self.seqs = array.array("q")
        self.frames = b""

    @classmethod
    def of(cls, seqs: Sequence[int], frames: Sequence[bytes], layout: Layout = ALL_COLUMNS
           ) -> RawMessages:
        """``frames[i]`` is message ``seqs[i]``'s Basic.Deliver, header and body frames."""
        packed = cls(layout)
        packed.seqs = array.array("q", seqs)
        packed.frames = b"".join(frames)
        return packed

    def __len__(self) -> int:
        return len(self.seqs)

    def to_arrow(self) -> Iterator[pa.RecordBatch]:
        columns = self._decode()
        schema = self.layout.arrow_schema()
        for start in range(0, len(self.seqs), ARROW_BATCH_ROWS):
            yield self._slice_to_arrow(columns, start, start + ARROW_BATCH_ROWS, schema)

    def _decode(self) -> tuple[list[bool], list[bytes], list[bytes], list[bytes], list[bytes]]:
        """The frames -> (redelivered, exchange, routing key, raw properties, body) lists."""
        blob = self.frames
        unpack = _FRAME_HEAD.unpack_from
        redelivered: list[bool] = []
        exchanges: list[bytes] = []
        routing_keys: list[bytes] = []
        properties: list[bytes] = []
        bodies: list[bytes] = []
        pos, end = 0, len(blob)
        while pos < end:
            _type, _channel, size = unpack(blob, pos)
            at = pos + 12 + blob[pos + 11]  # past the method id and the consumer tag
            redelivered.append(bool(blob[at + 8] & 1))  # after the delivery tag
            at += 9
            exchanges.append(blob[at + 1 : at + 1 + blob[at]])
            at += 1 + blob[at]
            routing_keys.append(blob[at + 1 : at + 1 + blob[at]])
            pos += 8 + size
            _type, _channel, size = unpack(blob, pos)
            if _type != wire.FRAME_HEADER:
                raise ValueError(f"malformed delivery at byte {pos}: frame type {_type}")
            (remaining,) = _U64.unpack_from(blob, pos + 11)
            properties.append(blob[pos + 19 : pos + 7 + size])
            pos += 8 + size
            if not remaining:
                bodies.append(b"")
                continue
            _type, _channel, size = unpack(blob, pos)
            if size == remaining:  # the usual case: one body frame
                bodies.append(blob[pos + 7 : pos + 7 + size])
                pos += 8 + size
                continue
            chunks = []
            while remaining > 0:
                _type, _channel, size = unpack(blob, pos)
                chunks.append(blob[pos + 7 : pos + 7 + size])
                remaining -= size
                pos += 8 + size
            bodies.append(b"".join(chunks))
        return redelivered, exchanges, routing_keys, properties, bodies

    def _slice_to_arrow(
        self, columns: tuple[list[bool], list[bytes], list[bytes], list[bytes], list[bytes]],
        start: int, stop: int, schema: pa.Schema,
    ) -> pa.RecordBatch:
        redelivered, exchanges, routing_keys, properties, bodies = columns
        raw = properties[start:stop]
        props: dict[str, list[Any]] = {name: [None] * len(raw) for name in _PROPERTY_COLUMNS}
        ids, modes = props["message_id"], props["delivery_mode"]
        headers_as_json = self.layout.headers_as_json
        wants_properties = any(name in props for name in schema.names)
        for i, blob in enumerate(raw if wants_properties else ()):
            if blob == _EMPTY_PROPERTIES:
                continue
            if blob[:2] == _PERSISTENT_WITH_ID and len(blob) == 4 + blob[3]:
                modes[i] = blob[2]
                ids[i] = blob[4:]  # UTF-8 bytes: Arrow checks them as it builds the column
                continue
            for name, value in wire.decode_properties(blob).items():
                if name == "headers":
                    if headers_as_json:
                        value = headers_to_json(value)
                    else:
                        value = [(str(k), header_value(v)) for k, v in value.items()]
                elif name == "timestamp":
                    value = value * 1_000_000
                elif name == "cluster_id":
                    continue
                props[name][i] = value
        direct: dict[str, Sequence[Any]] = {
            "body": bodies, "routing_key": routing_keys, "exchange": exchanges,
            "redelivered": redelivered, "seq": self.seqs,
        }
        arrays = [
            pa.array(direct[name][start:stop] if name in direct else props[name], field.type)
            for name, field in zip(schema.names, schema, strict=True)
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def check_sink_columns(names: Sequence[str], routing_key_column: str | None) -> None:
    """Raise a clear error for a DataFrame the sink cannot publish."""
    if "body" not in names:
        raise ValueError(
            f"the leveret sink needs a 'body' column (binary or string); got columns {list(names)}"
        )
    if routing_key_column and routing_key_column not in names:
        raise ValueError(
            f"routingKeyColumn is {routing_key_column!r} but the DataFrame has no such column; "
            f"columns: {list(names)} (set option routingKey for a constant key)"
        )
