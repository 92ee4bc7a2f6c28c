"""The row schema of the ``leveret`` format, and messages <-> Arrow columns.

A source row is one delivered message::

    body binary, routing_key string, exchange string, message_id string,
    headers map<string,string>, content_type, content_encoding,
    correlation_id, reply_to, expiration, type, user_id, app_id string,
    delivery_mode int, priority int, timestamp timestamp,
    redelivered boolean, seq long

``seq`` is the reader's position for the message (the streaming offset it
belongs to). Header values become strings (bytes as UTF-8, numbers and booleans
with ``str``), since a Spark map needs one value type; the sink publishes them
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
the writers receive them, so no Python ``Row`` is built per message.
"""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from . import wire
from .amqp_client import Delivery

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


class PackedMessages:
    """Deliveries in plain lists (cheap to pickle into a partition), one per column.

    Properties stay raw until :meth:`to_arrow`, which runs on the executor.
    """

    def __init__(self, headers_as_json: bool = False) -> None:
        self.headers_as_json = headers_as_json
        self.seqs: list[int] = []
        self.redelivered: list[bool] = []
        self.exchanges: list[str] = []
        self.routing_keys: list[str] = []
        self.properties: list[bytes] = []
        self.bodies: list[bytes] = []

    def add(self, seq: int, d: Delivery) -> None:
        self.seqs.append(seq)
        self.redelivered.append(d.redelivered)
        self.exchanges.append(d.exchange)
        self.routing_keys.append(d.routing_key)
        self.properties.append(d.raw_properties)
        self.bodies.append(d.body)

    def __len__(self) -> int:
        return len(self.seqs)

    def to_arrow(self) -> Iterator[pa.RecordBatch]:
        for start in range(0, len(self.seqs), ARROW_BATCH_ROWS):
            yield self._slice_to_arrow(start, start + ARROW_BATCH_ROWS)

    def _slice_to_arrow(self, start: int, stop: int) -> pa.RecordBatch:
        raw = self.properties[start:stop]
        props: dict[str, list[Any]] = {
            name: [None] * len(raw)
            for name in ("message_id", *STRING_PROPERTIES, "delivery_mode", "priority",
                         "timestamp", "headers")
        }
        empty = b"\x00\x00"
        for i, blob in enumerate(raw):
            if blob == empty:
                continue
            for name, value in wire.decode_properties(blob).items():
                if name == "headers":
                    if self.headers_as_json:
                        value = headers_to_json(value)
                    else:
                        value = [(str(k), header_value(v)) for k, v in value.items()]
                elif name == "timestamp":
                    value = value * 1_000_000
                elif name == "cluster_id":
                    continue
                props[name][i] = value
        columns = {
            "body": pa.array(self.bodies[start:stop], pa.binary()),
            "routing_key": pa.array(self.routing_keys[start:stop], pa.string()),
            "exchange": pa.array(self.exchanges[start:stop], pa.string()),
            "redelivered": pa.array(self.redelivered[start:stop], pa.bool_()),
            "seq": pa.array(self.seqs[start:stop], pa.int64()),
        }
        schema = ARROW_SCHEMA_JSON_HEADERS if self.headers_as_json else ARROW_SCHEMA
        arrays = [
            columns[name] if name in columns else pa.array(props[name], field.type)
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
