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

Rows are encoded column-wise, ``SLICE_ROWS`` of a batch at a time. The usual
batch (no property column but ``message_id``, bodies that fit one frame) has its
frames laid out by Arrow in one buffer (:mod:`.arrow_frames`): no Python object
per row, the body copied once. Any other batch takes the general path: the
columns become Python lists (string bodies cast to bytes and null bodies filled
by Arrow), a row whose only varying property is its ``message_id`` gets its
property bytes from a precomputed prefix, and :func:`.wire.encode_publishes`
builds each row's pieces. Rows sharing a routing key share one ``Basic.Publish``
frame. Either way the frames go to the connection ``CHUNK_ROWS`` at a time as
one buffer, and a chunk never takes more than the room the confirm window has
left.

``message_id`` is the row's own column when it has one (a source row carries
its message's id through), else ``<prefix>-<partition>-<index>``, where the
prefix names the query and batch: a retried task republishes the same ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .amqp_client import AmqpError, Connection, parse_url
from .process_tuning import task_started
from .row_encoding import Encoder, arrow_encoder, general_encoder
from .schema import check_sink_columns

MIN_CONFIRM_WINDOW = 2000  # unconfirmed publishes per task at least (~2 MB of 1 KB messages)
MAX_CONFIRM_WINDOW = 65536  # and at most, by default (~64 MB of 1 KB messages)
DEFAULT_CONFIRM_WINDOW = 0  # 0: the Arrow batch's row count, within the bounds above
CHUNK_ROWS = 1000  # rows handed to the socket at a time (~1 MB of 1 KB rows)
SLICE_ROWS = 16384  # rows encoded at once (Arrow's 32-bit offsets hold 2 GB: ~128 KB a row)


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
    for begin in range(0, rows, SLICE_ROWS):
        part = batch.slice(begin, SLICE_ROWS)
        encode = (arrow_encoder(conn, part, options, id_prefix, first_index + begin)
                  or general_encoder(conn, part, options, id_prefix, first_index + begin))
        _send(conn, part.num_rows, encode, options, window)
    return rows


def _send(conn: Connection, rows: int, encode: Encoder, options: PublishOptions,
          window: int) -> None:
    """Hand rows ``0..rows`` to the socket in chunks, never more than the confirm window's
    room unconfirmed."""
    confirms = conn.confirms
    assert confirms is not None
    start = 0
    while start < rows:
        room = window - confirms.outstanding
        if room <= 0:
            conn.wait_window(window // 2)
            _raise_refused(conn, options)
            continue
        stop = min(rows, start + min(room, CHUNK_ROWS))
        conn.publish_encoded(encode(start, stop), stop - start)
        start = stop


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
