"""Reading a stream queue by offset: the streaming source with ``stream=true``.

Theory of operation
-------------------
A stream queue is a log: reading it removes nothing, and a consumer chooses
where to start with the consumer argument ``x-stream-offset``; each delivery
carries its offset in header ``x-stream-offset`` (RabbitMQ's contract, which
Leveret keeps). So this reader's Spark offsets *are* stream offsets:
``{"offset": n}`` means "everything before stream offset ``n`` is done", and a
micro-batch ``[start, end)`` is the messages whose stream offset lies in it.
Spark writes those offsets to its checkpoint, so a restarted query replays
exactly from its last committed offset without the broker remembering
anything, and any number of queries read one stream independently.

The driver holds one consumer positioned at the offset Spark asks for. It
buffers deliveries in offset order up to the prefetch window (a stream
requires ``basic.qos``); ``basic.ack`` on a stream only gives credit back, so
the driver acks a delivery when Spark no longer needs it (its batch was
committed), which bounds the buffer. When Spark asks for an offset the buffer
does not cover (a restart replaying a batch from its offset log, or a seek
backwards), the reader closes its connection and consumes again with
``x-stream-offset: start``. Offsets may have holes (retention dropped the
head: an offset below the first is clamped by the broker), so ``end`` is one
past the last offset seen, never a count.

Why an option and not detection: a passive declare does not say a queue's
type, and asking the management API needs a second URL and credentials. A
wrong ``stream=true`` on a classic queue fails on its first delivery, which
carries no ``x-stream-offset`` (brokers ignore that consumer argument on
classic queues), with an error that says so; the delivery is not acked, so
closing the connection requeues it.

Filtering: option ``streamFilter`` (values, comma-separated) becomes the
consumer argument ``x-stream-filter`` (and ``streamMatchUnfiltered=true``
``x-stream-match-unfiltered``), so the broker sends only the messages whose
header ``x-stream-filter-value`` is one of the values. Offsets stay the
stream's (a batch's offsets have holes where messages were filtered out) and
Leveret's filter is exact; a RabbitMQ 3.13+ Bloom filter may let others
through, so rows are not filtered again here: add a ``where`` on the headers for
RabbitMQ. Keep the filter of a checkpointed query: a batch replayed with
another one may end before its end offset (the read then fails, saying so).
``end_of_stream`` reads unfiltered: it asks where the log ends.

Unlike :mod:`.source` there is no background drain thread: a stream's
messages are already stored, so reading them when Spark asks costs one
round of socket reads, and the code stays small.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from . import wire
from .amqp_client import AmqpError, Connection
from .deliveries import RawMessages
from .process_tuning import keep_freed_memory
from .source import (
    LINGER_S,
    MAX_PREFETCH,
    MessagesPartition,
    SourceOptions,
    check_queue,
    layout_of,
    read_partition,
    split,
)

OFFSET_HEADER = "x-stream-offset"
FILTER_ARGUMENT = "x-stream-filter"
MATCH_UNFILTERED_ARGUMENT = "x-stream-match-unfiltered"


def stream_filter(options: Mapping[str, str]) -> dict[str, object]:
    """Options ``streamFilter`` and ``streamMatchUnfiltered`` as consumer arguments
    (none without ``streamFilter``)."""
    opts = {k.lower(): v for k, v in options.items()}
    values = [v.strip() for v in str(opts.get("streamfilter") or "").split(",") if v.strip()]
    if not values:
        if opts.get("streammatchunfiltered") is not None:
            raise ValueError("streamMatchUnfiltered needs streamFilter")
        return {}
    unfiltered = str(opts.get("streammatchunfiltered", "false")).strip().lower()
    if unfiltered not in ("true", "false"):
        raise ValueError(f"streamMatchUnfiltered must be true or false, not {unfiltered!r}")
    return {FILTER_ARGUMENT: values, MATCH_UNFILTERED_ARGUMENT: unfiltered == "true"}


def starting_offset(options: Mapping[str, str]) -> int:
    """Option ``startingOffset``: ``first`` (the default) or a stream offset."""
    value = {k.lower(): v for k, v in options.items()}.get("startingoffset", "first")
    if str(value).strip().lower() == "first":
        return 0  # the broker clamps 0 to the first offset retention kept
    start = int(value)
    if start < 0:
        raise ValueError(f"startingOffset must be 'first' or an offset >= 0, not {value!r}")
    return start


def offset_of(frames: bytes) -> int:
    """The ``x-stream-offset`` header of one raw delivery (method, header, body frames)."""
    (method_size,) = wire.FRAME_HEADER_STRUCT.unpack_from(frames, 0)[2:]
    header_at = 7 + method_size + 1
    props = wire.decode_properties(frames, header_at + 7 + 12)  # after class, weight, size
    value = (props.get("headers") or {}).get(OFFSET_HEADER)
    if not isinstance(value, int):
        raise AmqpError(406, f"a delivery without header {OFFSET_HEADER!r}: is the queue a "
                        "stream? (option stream=true reads stream queues only)")
    return value


def end_of_stream(url: str, queue: str, quiet: float) -> int | None:
    """One past the stream's last offset now (None: empty), read from its last chunk."""
    conn = Connection(url, raw_deliveries=True).open()
    try:
        check_queue(conn, queue)
        conn.qos(MAX_PREFETCH)
        conn.consume(queue, {OFFSET_HEADER: "last"})
        end = None
        while conn.raw or conn.pump(quiet):  # some may come with the consume-ok
            while conn.raw:
                tag, frames = conn.raw.popleft()
                end = max(end or 0, offset_of(frames) + 1)
                conn.ack(tag, multiple=True)  # credit, so a long last chunk keeps coming
        return end
    finally:
        conn.close()


class StreamOffsetReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """``readStream.format("leveret").option("stream", "true")``: a stream read by offset."""

    def __init__(self, options: Mapping[str, str], schema: StructType | None = None) -> None:
        self.opts = SourceOptions.from_options(options)
        self.layout = layout_of(schema, self.opts)
        self.start = starting_offset(options)
        self.filter = stream_filter(options)
        self.window = min(self.opts.prefetch, MAX_PREFETCH)
        self._conn: Connection | None = None
        self._buf: deque[tuple[int, int, bytes]] = deque()  # (offset, delivery tag, frames)
        self._pos = 0  # every offset below this that the consumer will deliver is in _buf
        self._low = 0  # the buffer covers the stream from here (nothing below is wanted)
        self._until: int | None = None  # availableNow: the stream's end when the query started

    # --- the consumer ------------------------------------------------------------

    def _seek(self, start: int) -> Connection:
        """A consumer whose buffer covers ``start``: keep it, or consume again from there."""
        if self._conn is not None and self._low <= start <= self._pos:
            self._release_below(start)
            return self._conn
        self.stop()
        keep_freed_memory()
        conn = Connection(self.opts.url, raw_deliveries=True).open()
        try:
            check_queue(conn, self.opts.queue)
            conn.qos(self.window)
            conn.consume(self.opts.queue, {OFFSET_HEADER: start, **self.filter})
        except BaseException:
            conn.close()
            raise
        self._conn, self._low, self._pos = conn, start, start
        return conn

    def _release_below(self, offset: int) -> None:
        """Give credit for what Spark no longer needs (a stream ack removes nothing)."""
        last_tag = None
        while self._buf and self._buf[0][0] < offset:
            last_tag = self._buf.popleft()[1]
        self._low = max(self._low, offset)
        if last_tag is not None and self._conn is not None:
            self._conn.ack(last_tag, multiple=True)

    def _collect(self, conn: Connection) -> None:
        while conn.raw:
            tag, frames = conn.raw.popleft()
            offset = offset_of(frames)
            if offset >= self._pos:  # clamping or a re-consume may repeat nothing else
                self._buf.append((offset, tag, frames))
                self._pos = offset + 1

    def _read(self, conn: Connection, done: Callable[[], bool], first_wait: float) -> None:
        """Read deliveries until ``done()`` or the socket stays quiet (the log's end)."""
        self._collect(conn)
        wait = first_wait
        while not done() and len(self._buf) < self.window:
            if not conn.pump(wait):
                break
            self._collect(conn)
            wait = LINGER_S

    # --- Spark's interface ---------------------------------------------------------

    def initialOffset(self) -> dict:
        return {"offset": self.start}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_per_trigger:
            return ReadMaxRows(self.opts.max_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._until = end_of_stream(self.opts.url, self.opts.queue, self.opts.poll_s) or 0

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = int(start["offset"])
        conn = self._seek(begin)
        want: float = limit.max_rows if isinstance(limit, ReadMaxRows) else math.inf
        until = self._until

        def enough() -> bool:
            if until is not None and self._pos >= until:
                return True
            return len(self._buf) >= want

        self._read(conn, enough, self.opts.poll_s)
        batch = [offset for offset, _tag, _frames in self._buf
                 if until is None or offset < until][: int(min(want, len(self._buf)))]
        return {"offset": max(begin, batch[-1] + 1) if batch else begin}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = int(start["offset"]), int(end["offset"])
        if stop <= begin:
            return []
        conn = self._seek(begin)
        # After a restart Spark replays the batch in its offset log: read up to its end.
        self._read(conn, lambda: self._pos >= stop, self.opts.refill_timeout_s)
        if self._pos < stop:
            changed = " (did streamFilter change since the checkpoint?)" if self.filter else ""
            raise AmqpError(404, f"stream {self.opts.queue!r} ended at offset {self._pos}, "
                            f"before the batch [{begin}, {stop}) Spark asked for{changed}")
        batch = [(offset, frames) for offset, _tag, frames in self._buf if offset < stop]
        return split([o for o, _ in batch], [f for _, f in batch], self.opts.partitions,
                     self.layout)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, MessagesPartition)
        return read_partition(partition)

    def commit(self, end: dict) -> None:
        self._release_below(int(end["offset"]))

    def stop(self) -> None:
        conn, self._conn = self._conn, None
        self._buf.clear()
        if conn is not None:
            conn.close()


class StreamBatchReader(DataSourceReader):  # type: ignore[misc]
    """``spark.read.format("leveret").option("stream", "true")``: a stream's messages now.

    Reads ``[startingOffset, end)``, ``end`` being one past the stream's last offset
    when the read starts, at most ``maxMessages`` offsets and the prefetch window
    (a stream read holds its messages until the read is planned). Nothing is consumed.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType | None = None) -> None:
        self.stream = StreamOffsetReader(options, schema)

    def partitions(self) -> Sequence[InputPartition]:
        r = self.stream
        empty = [MessagesPartition(RawMessages(r.layout))]
        end = end_of_stream(r.opts.url, r.opts.queue, r.opts.poll_s)
        if end is None:
            return empty
        most = min(r.window, r.opts.max_messages or r.window)
        try:
            if r.filter:  # offsets with holes: up to the last match before the end
                r._until = end
                end = r.latestOffset({"offset": r.start}, ReadMaxRows(most))["offset"]
            else:
                end = min(end, r.start + most)
            return r.partitions({"offset": r.start}, {"offset": end}) or empty
        finally:
            r.stop()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, MessagesPartition)
        return read_partition(partition)
