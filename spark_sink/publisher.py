"""Publishing Arrow batches with confirms, and the ``foreachBatch`` publisher.

Theory of operation
-------------------
Every sink path (streaming sink, batch write, ``foreachBatch``) ends in
:func:`publish_batches`, which runs inside one Spark task: it takes a
connection in confirm mode and publishes the task's rows as persistent
messages with up to ``confirmWindow`` of them unconfirmed (pipelined, never
one confirm at a time; by default the window is the Arrow batch, so a
micro-batch is written without waiting for a confirm). It returns only when
every message is confirmed, so a task that finished has handed all its rows to
the broker; a nack, an unroutable ``mandatory`` publish or a lost connection
fails the task and Spark retries it (at-least-once: consumers deduplicate on
``message_id``).

Connections outlive tasks: Spark reuses its Python worker processes
(``spark.python.worker.reuse``, on by default), so each process keeps one idle
connection per broker and credentials (:class:`ConnectionPool`) and the next
micro-batch's task skips the TCP and AMQP handshakes. A connection goes back
to the pool only after a task that ended with everything confirmed; any error
closes it.

Rows are encoded column-wise: the Arrow columns become Python lists once per
batch (string bodies cast to bytes and null bodies filled by Arrow), a row whose
only varying property is its ``message_id`` (what a source row carries, or the
generated id) gets its property bytes from a precomputed prefix, without walking
the property table, and rows sharing a routing key share one ``Basic.Publish``
frame. Their frames are then encoded ``CHUNK_ROWS`` at a time
(:func:`.wire.encode_publishes`) and handed to the connection as one buffer, so
the client costs no Python call per row; a chunk never takes more than the room
the confirm window has left.

``message_id`` is the row's own column when it has one (a source row carries
its message's id through), else ``<prefix>-<partition>-<index>``, where the
prefix names the query and batch: a retried task republishes the same ids.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pamqp import encode as pencode

from . import wire
from .amqp_client import CHANNEL, AmqpError, Connection, parse_url
from .process_tuning import task_started
from .schema import SINK_PROPERTY_COLUMNS, check_sink_columns, headers_from_json

MIN_CONFIRM_WINDOW = 2000  # unconfirmed publishes per task at least (~2 MB of 1 KB messages)
MAX_CONFIRM_WINDOW = 65536  # and at most, by default (~64 MB of 1 KB messages)
DEFAULT_CONFIRM_WINDOW = 0  # 0: the Arrow batch's row count, within the bounds above
CHUNK_ROWS = 1000  # rows encoded and handed to the socket at a time (~1 MB of 1 KB rows)
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")
_FLAGS = {name: (flag, kind) for name, flag, kind in wire.PROPERTY_FLAGS}
_PERSISTENT = _U8.pack(2)
_LENGTH_BYTE = [bytes((n,)) for n in range(256)]
_MESSAGE_ID_FLAG = _FLAGS["message_id"][0]
_DELIVERY_MODE_FLAG = _FLAGS["delivery_mode"][0]


def _bool(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class PublishOptions:
    url: str
    exchange: str = ""
    routing_key_column: str | None = "routing_key"
    routing_key: str = ""
    mandatory: bool = False
    persistent: bool = True
    confirm_window: int = DEFAULT_CONFIRM_WINDOW
    message_id_prefix: str = ""

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> PublishOptions:
        """Spark options (keys arrive lower-cased) -> PublishOptions."""
        opts = {k.lower(): v for k, v in options.items()}
        if "url" not in opts:
            raise ValueError("the leveret sink needs option 'url' (amqp://user:pass@host:port/vhost)")
        return cls(
            url=opts["url"],
            exchange=opts.get("exchange", ""),
            routing_key_column=opts.get("routingkeycolumn", "routing_key") or None,
            routing_key=opts.get("routingkey", ""),
            mandatory=_bool(opts.get("mandatory", "false")),
            persistent=_bool(opts.get("persistent", "true")),
            confirm_window=int(opts.get("confirmwindow", DEFAULT_CONFIRM_WINDOW)),
            message_id_prefix=opts.get("messageidprefix", ""),
        )

    def checked(self, column_names: list[str]) -> PublishOptions:
        """Validate against the DataFrame's columns; a default key column may be absent."""
        explicit = self.routing_key_column not in (None, "routing_key")
        rk_col = self.routing_key_column
        if rk_col == "routing_key" and rk_col not in column_names:
            rk_col = None
        check_sink_columns(column_names, rk_col if explicit or rk_col else None)
        return PublishOptions(**{**self.__dict__, "routing_key_column": rk_col})


class PublishError(RuntimeError):
    """Messages the broker refused (nack) or could not route (mandatory)."""


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


class ConnectionPool:
    """Idle confirm-mode connections of one worker process, keyed by broker and credentials."""

    def __init__(self) -> None:
        self._idle: dict[tuple[Any, ...], Connection] = {}

    @staticmethod
    def key(url: str) -> tuple[Any, ...]:
        p = parse_url(url)
        return (p["host"], p["port"], p["user"], p["password"], p["vhost"])

    def take(self, url: str) -> Connection:
        """An open connection in confirm mode with nothing outstanding (a pooled one if alive)."""
        conn = self._idle.pop(self.key(url), None)
        if conn is not None:
            try:
                conn.pump(0)  # a broker-side close or EOF shows up here
                return conn
            except (OSError, ValueError, AmqpError):  # ValueError: a closed socket's fd is -1
                conn.close()
        conn = Connection(url).open()
        try:
            conn.confirm_select()
        except BaseException:
            conn.close()
            raise
        return conn

    def give(self, url: str, conn: Connection) -> None:
        """Keep ``conn`` for the next task (its previous idle twin, if any, is closed)."""
        old = self._idle.pop(self.key(url), None)
        if old is not None:
            old.close()
        self._idle[self.key(url)] = conn

    def close_all(self) -> None:
        while self._idle:
            self._idle.popitem()[1].close()


POOL = ConnectionPool()  # one per Python worker process: tasks in it run one at a time


def publish_batches(
    batches: Iterable[pa.RecordBatch], options: PublishOptions, id_prefix: str,
    pool: ConnectionPool | None = None,
) -> int:
    """Publish every row of ``batches`` and wait for all confirms; returns the row count."""
    task_started()
    pool = POOL if pool is None else pool
    conn = pool.take(options.url)
    try:
        count = 0
        for batch in batches:
            window = options.confirm_window or min(
                MAX_CONFIRM_WINDOW, max(MIN_CONFIRM_WINDOW, batch.num_rows))
            count += _publish_batch(conn, batch, options, id_prefix, count, window)
        conn.wait_window(0)
        _raise_refused(conn, options)
    except BaseException:
        conn.close()
        raise
    pool.give(options.url, conn)
    return count


def _publish_batch(
    conn: Connection,
    batch: pa.RecordBatch,
    options: PublishOptions,
    id_prefix: str,
    first_index: int,
    window: int,
) -> int:
    rows = batch.num_rows
    if not rows:
        return 0
    names = batch.schema.names
    bodies = _bodies(batch.column(names.index("body")))
    props = _properties(batch, options, id_prefix, first_index)
    prefixes = _method_frames(conn, batch, options)
    confirms = conn.confirms
    assert confirms is not None
    frame_max = conn.frame_max
    start = 0
    while start < rows:
        room = window - confirms.outstanding
        if room <= 0:
            conn.wait_window(window // 2)
            _raise_refused(conn, options)
            continue
        stop = min(rows, start + min(room, CHUNK_ROWS))
        pieces = wire.encode_publishes(
            prefixes if isinstance(prefixes, bytes) else prefixes[start:stop], CHANNEL,
            props[start:stop], bodies[start:stop], frame_max)
        conn.publish_encoded(b"".join(pieces), stop - start)
        start = stop
    return rows


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
    keys = batch.column(batch.schema.names.index(options.routing_key_column)).to_pylist()
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


def _raise_refused(conn: Connection, options: PublishOptions) -> None:
    confirms = conn.confirms
    if confirms is not None and confirms.nacked:
        raise PublishError(
            f"broker nacked {confirms.nacked} message(s) published to exchange "
            f"{options.exchange!r} (e.g. a full queue with overflow=reject-publish, or a disk error)"
        )
    if conn.returned:
        first = conn.returned[0]
        raise PublishError(
            f"{len(conn.returned)} message(s) returned as unroutable (mandatory): first to "
            f"exchange {first.exchange!r} with routing key {first.routing_key!r}: "
            f"{first.reply_code} {first.reply_text}"
        )


def task_partition_id() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


def task_local_property(key: str) -> str | None:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.getLocalProperty(key) if ctx is not None else None


def publisher(
    url: str,
    exchange: str = "",
    routing_key_column: str | None = "routing_key",
    routing_key: str = "",
    mandatory: bool = False,
    persistent: bool = True,
    confirm_window: int = DEFAULT_CONFIRM_WINDOW,
) -> Callable[[Any, int], None]:
    """A ``foreachBatch`` function publishing each micro-batch with confirms.

    ``df.writeStream.foreachBatch(publisher(url, exchange="out")).start()``;
    the batch is written by Spark's executors in parallel (one connection per
    partition) and the call returns when every row is confirmed.
    """

    def write_batch(df: Any, batch_id: int) -> None:
        from . import register

        register(df.sparkSession)
        query_id = df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
        writer = (
            df.write.format("leveret")
            .mode("append")
            .option("url", url)
            .option("exchange", exchange)
            .option("routingKeyColumn", routing_key_column or "")
            .option("routingKey", routing_key)
            .option("mandatory", str(mandatory).lower())
            .option("persistent", str(persistent).lower())
            .option("confirmWindow", str(confirm_window))
            .option("messageIdPrefix", f"{query_id or 'batch'}-{batch_id}-")
        )
        writer.save()

    return write_batch
