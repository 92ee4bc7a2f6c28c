"""Reading a queue: the streaming source and the batch reader.

Theory of operation
-------------------
Spark runs a stream reader's planning methods (``initialOffset``,
``latestOffset``, ``partitions``, ``commit``, ``stop``) in one long-lived
Python process on the driver, and ``read(partition)`` on executor workers.
Delivery tags can only be acked on the channel that received them, so the
**driver consumes**: it holds the only connection, drains deliveries in bulk
into a :class:`~.ledger.Ledger` that numbers them, and ships each batch's
payloads to the executors inside the partitions. Executors never talk to the
broker on the read side. The driver is one Python process for the whole
stream, so it does as little per message as it can: it keeps each delivery as
the bytes of its frames (``raw_deliveries``), numbers it, and ships a
partition as one blob; the executors, in parallel, decode the frames into
Arrow columns (:class:`~.deliveries.RawMessages`).

Acks follow Spark's commit log. ``latestOffset(start)`` is called after the
batch ending at ``start`` was committed, so it acks every message below
``start`` (``commit(end)`` does the same, but Spark calls it late; acking only
there would stall once the prefetch window is full of committed messages).
A driver that dies before acking leaves the messages unacked; the broker
requeues them and they come back, marked redelivered, in a later batch.

While Spark runs a batch, a thread in the driver process keeps reading the
socket into the ledger (up to the prefetch window), so the next
``latestOffset`` finds its messages already there instead of starting a
drain; the thread and Spark's calls share one lock around the connection.
The window is what Spark may hold at once: the batch it is running, which
stays unacked until its commit, plus the next one, i.e. twice
``maxMessagesPerTrigger`` (at least ``DEFAULT_PREFETCH``). ``basic.qos``
counts in a 16-bit short, so a larger window is split over several consumers
on the one channel, each with its own per-consumer limit (RabbitMQ and
Leveret both apply ``global=false`` per consumer); delivery tags are per
channel, so one ``basic.ack(multiple=true)`` still settles them all.

The reader object is constructed and pickled several times before it is used,
so its constructor only parses options; it connects on first use.
"""

from __future__ import annotations

import contextlib
import math
import select
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .amqp_client import AmqpError, Connection
from .deliveries import RawMessages
from .ledger import Ledger
from .process_tuning import keep_freed_memory, task_started
from .schema import ALL_COLUMNS, Layout

DEFAULT_PREFETCH = 20000  # unacked deliveries the driver holds at least (~20 MB of 1 KB messages)
LINGER_S = 0.05  # a drain ends after this long without new data
FILL_QUIET_S = 0.5  # while the queue says more is coming, a gap this long ends a batch
DRAIN_TICK_S = 0.2  # the drain thread re-checks for stop this often when idle
DEFAULT_POLL_S = 0.5  # how long latestOffset waits when nothing at all is buffered
REFILL_TIMEOUT_S = 10.0  # replaying a batch after a restart waits this long for its messages
DEFAULT_PARTITIONS = 2  # at most, unless numPartitions says otherwise
# Without numPartitions, a batch is split only into runs of at least this many messages:
# each Spark task costs two Python runner calls and a worker clean-up, so on the two-core
# bench machine a 5,000-message batch ran ~10% faster with ~25% less CPU per row as one
# task than as two (bench/spark_bench.py --source-partitions).
MIN_PARTITION_MESSAGES = 10000
MAX_PREFETCH = 65535  # basic.qos prefetch-count is a short


def _bool(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class SourceOptions:
    url: str
    queue: str
    max_per_trigger: int | None = None
    prefetch: int = DEFAULT_PREFETCH
    poll_s: float = DEFAULT_POLL_S
    partitions: int | None = None  # numPartitions; None: by batch size, up to the default
    refill_timeout_s: float = REFILL_TIMEOUT_S
    max_messages: int | None = None  # batch reads only
    consume: bool = False  # batch reads only: ack what was read
    headers_as_json: bool = False  # the headers column as one JSON object (typed values)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SourceOptions:
        opts = {k.lower(): v for k, v in options.items()}
        for required in ("url", "queue"):
            if not opts.get(required):
                raise ValueError(f"the leveret source needs option {required!r}")
        max_per_trigger = int(opts["maxmessagespertrigger"]) if opts.get(
            "maxmessagespertrigger") else None
        default_prefetch = max(DEFAULT_PREFETCH, 2 * (max_per_trigger or 0))
        return cls(
            url=opts["url"],
            queue=opts["queue"],
            max_per_trigger=max_per_trigger,
            prefetch=max(1, int(opts.get("prefetch", default_prefetch))),
            poll_s=float(opts.get("polltimeoutms", DEFAULT_POLL_S * 1000)) / 1000,
            partitions=max(1, int(opts["numpartitions"])) if opts.get("numpartitions") else None,
            refill_timeout_s=float(opts.get("refilltimeoutms", REFILL_TIMEOUT_S * 1000)) / 1000,
            max_messages=int(opts["maxmessages"]) if opts.get("maxmessages") else None,
            consume=_bool(opts.get("consume", "false")),
            headers_as_json=_bool(opts.get("headersasjson", "false")),
        )


class MessagesPartition(InputPartition):  # type: ignore[misc]
    """One Spark task's share of a batch: the messages themselves, as delivered."""

    def __init__(self, packed: RawMessages) -> None:
        super().__init__(len(packed))
        self.packed = packed


def split(
    seqs: Sequence[int], frames: Sequence[bytes], parts: int | None,
    layout: Layout = ALL_COLUMNS,
) -> list[MessagesPartition]:
    """Contiguous runs of seq, one partition each (at most ``parts``, none empty).

    ``frames[i]`` is message ``seqs[i]``'s delivered frames (``amqp_client.RawDelivery``).
    ``parts=None``: up to ``DEFAULT_PARTITIONS`` runs of ``MIN_PARTITION_MESSAGES`` or more.
    """
    if not seqs:
        return []
    if parts is None:
        parts = max(1, min(DEFAULT_PARTITIONS, len(seqs) // MIN_PARTITION_MESSAGES))
    size = math.ceil(len(seqs) / parts)
    return [MessagesPartition(RawMessages.of(seqs[start : start + size],
                                             frames[start : start + size], layout))
            for start in range(0, len(seqs), size)]


def read_partition(partition: MessagesPartition) -> Iterator[pa.RecordBatch]:
    task_started()
    yield from partition.packed.to_arrow()


def check_queue(conn: Connection, queue: str) -> int:
    """Ready message count of ``queue``; a clear error if it does not exist."""
    try:
        return int(conn.queue_declare(queue, passive=True).message_count)
    except AmqpError as exc:
        if exc.reply_code == 404:
            raise ValueError(
                f"queue {queue!r} does not exist on {conn.params['host']}:{conn.params['port']} "
                f"vhost {conn.params['vhost']!r}: declare it before reading"
            ) from exc
        raise


def consume_windowed(conn: Connection, queue: str, window: int) -> int:
    """Consume ``queue`` with at most ``window`` unacked deliveries; returns the consumer count."""
    consumers = math.ceil(window / MAX_PREFETCH)
    conn.qos(math.ceil(window / consumers))
    for _ in range(consumers):
        conn.consume(queue)
    return consumers


def layout_of(schema: StructType | None, opts: SourceOptions) -> Layout:
    """The columns Spark asks for (a user's schema, or ours)."""
    fields = None if schema is None else [(f.name, f.dataType.simpleString()) for f in schema]
    return Layout.of(fields, opts.headers_as_json)


class LeveretStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    def __init__(self, options: Mapping[str, str], schema: StructType | None = None) -> None:
        self.opts = SourceOptions.from_options(options)
        self.layout = layout_of(schema, self.opts)
        self._conn: Connection | None = None
        self._cond: threading.Condition | None = None  # guards conn and ledger once connected
        self._thread: threading.Thread | None = None
        self._error: AmqpError | None = None
        self._ledger: Ledger[bytes] = Ledger()
        self._avail_now_left: int | None = None  # messages still inside the availableNow target
        self._avail_now_end: int | None = None  # seq just past the last of them

    # --- connection and the drain thread -----------------------------------------

    def _connection(self) -> Connection:
        """Connect, start consuming, and start the thread that drains the socket."""
        if self._error is not None:
            raise self._error
        if self._conn is None:
            keep_freed_memory()  # this is Spark's runner process for the reader
            conn = Connection(self.opts.url, raw_deliveries=True).open()
            try:
                check_queue(conn, self.opts.queue)
                consume_windowed(conn, self.opts.queue, self.opts.prefetch)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
            self._cond = threading.Condition()
            self._thread = threading.Thread(
                target=self._drain_forever, name="leveret-source-drain", daemon=True
            )
            self._thread.start()
        return self._conn

    def _drain_forever(self) -> None:
        """Keep reading deliveries while Spark runs the current batch (runs in a thread)."""
        conn, cond = self._conn, self._cond
        assert conn is not None and conn.sock is not None and cond is not None
        sock = conn.sock
        try:
            while self._conn is conn:
                readable, _, _ = select.select([sock], [], [], DRAIN_TICK_S)
                if not readable:
                    continue
                with cond:
                    if self._conn is not conn:
                        return
                    conn.pump(0)
                    if self._collect():
                        cond.notify_all()
        except (OSError, ValueError, AmqpError) as exc:
            if self._conn is conn:
                self._error = exc if isinstance(exc, AmqpError) else AmqpError(
                    320, f"connection lost: {exc}", "connection")
                with cond:
                    cond.notify_all()

    def _collect(self) -> int:
        """Number every buffered delivery (caller holds the condition)."""
        conn = self._conn
        if conn is None:
            return 0
        deliveries = conn.raw
        count = len(deliveries)
        if not count:
            return 0
        seq = self._ledger.extend(deliveries)
        deliveries.clear()
        if self._avail_now_left:
            # The availableNow target ends at its last message (later arrivals are not in it).
            taken = min(self._avail_now_left, count)
            self._avail_now_left -= taken
            self._avail_now_end = seq + 1 - (count - taken)
        return count

    def _fill(self, start: int, want: float, first_wait: float) -> None:
        """Gather a batch: what is held, plus what the queue still has room to send.

        Right after an ack opens the prefetch window the broker needs a moment to
        start sending again, so a short quiet gap is not the end of the data; the
        queue's ready count says how much more to expect.
        """
        conn = self._connection()
        cond = self._cond
        assert cond is not None
        with cond:
            self._collect()
            have = self._ledger.available_from(start)
            if have >= want:
                return
            ready = int(conn.queue_declare(self.opts.queue, passive=True).message_count)
            self._collect()
            have = self._ledger.available_from(start)
            room = max(0, self.opts.prefetch - self._ledger.held)
            expect = min(want, have + min(ready, room))
        if expect > have:
            self._drain(start, expect, max(first_wait, FILL_QUIET_S), FILL_QUIET_S)
        elif have == 0:
            self._drain(start, want, first_wait)  # an empty queue: wait for new arrivals

    def _drain(
        self, start: int, want: float, first_wait: float, quiet: float = LINGER_S
    ) -> None:
        """Wait until ``want`` messages are held from ``start`` or deliveries stop coming."""
        self._connection()
        cond = self._cond
        assert cond is not None
        with cond:
            self._collect()
            wait = first_wait if self._ledger.available_from(start) == 0 else quiet
            while self._ledger.available_from(start) < want and self._error is None:
                if not cond.wait(wait):
                    break  # quiet for `wait`: that is all there is for now
                wait = quiet
        if self._error is not None:
            raise self._error

    def _locked(self) -> Any:
        return self._cond if self._cond is not None else contextlib.nullcontext()

    def _ack_below(self, seq: int) -> None:
        with self._locked():
            tag = self._ledger.release_below(seq)
            if tag is not None and self._conn is not None:
                self._conn.ack(tag, multiple=True)
                self._collect()

    # --- Spark's interface ---------------------------------------------------------

    def initialOffset(self) -> dict:
        return {"seq": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_per_trigger:
            return ReadMaxRows(self.opts.max_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # Count before consuming: once the consumer starts, messages stop being "ready".
        conn = Connection(self.opts.url).open()
        try:
            ready = check_queue(conn, self.opts.queue)
        finally:
            conn.close()
        self._avail_now_left = ready
        self._avail_now_end = None

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = int(start["seq"])
        with self._locked():
            self._ledger.catch_up(begin)
        self._ack_below(begin)  # the batch ending at `begin` is in Spark's commit log
        want: float = limit.max_rows if isinstance(limit, ReadMaxRows) else math.inf
        wait = self.opts.poll_s
        if self._avail_now_left is not None:
            if self._avail_now_left > 0:
                wait = max(wait, self.opts.refill_timeout_s)  # they exist: wait for them
            else:
                want = min(want, (self._avail_now_end or begin) - begin)
        if want > 0:
            self._fill(begin, want, wait)
        with self._locked():
            end = self._ledger.next_seq or begin
        if self._avail_now_left is not None:
            end = min(end, self._avail_now_end or begin)
        if want != math.inf:
            end = min(end, begin + int(want))
        return {"seq": max(begin, end)}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = int(start["seq"]), int(end["seq"])
        with self._locked():
            self._ledger.catch_up(begin)
            next_seq = self._ledger.next_seq or begin
        if next_seq < stop:
            # Spark is replaying a batch from its offset log (the driver restarted): the
            # requeued messages come back first and fill it.
            self._drain(begin, stop - begin, self.opts.refill_timeout_s)
        with self._locked():
            self._ledger.skip_to(stop)
            seqs, frames = self._ledger.between(begin, stop)
        return split(seqs, frames, self.opts.partitions, self.layout)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, MessagesPartition)
        return read_partition(partition)

    def commit(self, end: dict) -> None:
        self._ack_below(int(end["seq"]))

    def stop(self) -> None:
        # No ack here: whatever Spark did not commit goes back to the queue.
        conn, self._conn = self._conn, None
        if conn is not None and self._cond is not None:
            with self._cond:
                conn.close()
        if self._thread is not None:
            self._thread.join(5)


class LeveretBatchReader(DataSourceReader):  # type: ignore[misc]
    """``spark.read.format("leveret")``: the messages ready in the queue now.

    The driver drains up to ``maxMessages`` (default: the ready count), ships
    them in the partitions, then either requeues them (default: a look that
    leaves the queue as it was, the messages marked redelivered) or, with
    ``consume=true``, acks them once planned (at-most-once for the job).
    """

    def __init__(self, options: Mapping[str, str], schema: StructType | None = None) -> None:
        self.opts = SourceOptions.from_options(options)
        self.layout = layout_of(schema, self.opts)

    def partitions(self) -> Sequence[InputPartition]:
        conn = Connection(self.opts.url, raw_deliveries=True).open()
        try:
            ready = check_queue(conn, self.opts.queue)
            want = ready if self.opts.max_messages is None else min(ready, self.opts.max_messages)
            if want == 0:
                return [MessagesPartition(RawMessages(self.layout))]
            # Without acks, the prefetch window must hold the whole read (0 = unlimited).
            window = min(want, self.opts.prefetch) if self.opts.consume else want
            conn.qos(window if window <= MAX_PREFETCH else 0)
            conn.consume(self.opts.queue)
            got: list[bytes] = []
            last_tag = 0
            while len(got) < want:
                if not conn.raw and not conn.pump(self.opts.refill_timeout_s):
                    break
                while conn.raw and len(got) < want:
                    last_tag, frames = conn.raw.popleft()
                    got.append(frames)
                if self.opts.consume and last_tag:
                    conn.ack(last_tag)
                    last_tag = 0
            return split(range(len(got)), got, self.opts.partitions, self.layout) or [
                MessagesPartition(RawMessages(self.layout))]
        finally:
            conn.close()  # unacked deliveries (all of them unless consume=true) are requeued

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, MessagesPartition)
        return read_partition(partition)
