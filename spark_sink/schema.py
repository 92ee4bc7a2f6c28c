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
delivered in (:class:`.deliveries.RawMessages`), decoded into columns on the executor.
"""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Sequence
from typing import Any, NamedTuple

import pyarrow as pa

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
