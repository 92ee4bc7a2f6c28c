"""A stream queue (``x-queue-type: stream``): an append-only log read by offset.

Theory of operation
-------------------
A stream is a queue whose messages are never taken: each consumer reads the
whole log from an offset of its choosing, and acks only give it credit back.
``Stream`` is a ``Queue`` flavour chosen once at declare time
(``queues/flavours.py``), overriding what differs: publish appends, consumers
are readers, basic.get and queue.purge are refused.

Appending. A publish gives the message the next offset (from 0; offsets are
never reused and survive restarts) and records it through the group commit as
the stream's entry ``(qid, offset)``, whatever its delivery mode: the publisher's
confirm waits for that batch's fsync (``HELD``). RabbitMQ streams do not fsync;
Leveret's confirm is stronger. The batch is the stream's *chunk*; its arrival
time goes in every entry of it (``stream_log.py``).

Reading. Consumers see committed offsets only, as RabbitMQ delivers written
chunks only: once a batch is committed (``_on_commit``) the readers waiting at
the end of the log resume. Each consumer has a ``Reader``: its next offset and
a bounded read-ahead (``stream_reader.py``) taken from pages of the log read and
prepared once for all readers and kept within a byte bound (``stream_cache.py``). Every delivery carries header ``x-stream-offset``
(``stream_header.py``). Credit is the consumer's prefetch: ``basic.ack``,
``basic.nack`` and ``basic.reject`` each give one delivery's credit back and
change nothing else (RabbitMQ 3.11+; 3.10 closes the connection with 540 on a
nack or reject: Leveret keeps the consumer going and says so in
docs/differences.md). Nothing is ever redelivered.

Offset tracking (``stream_tracking.py``) keeps, per consumer tag, the highest
offset up to which every delivery was settled: a consumer resumes after it.

Compiled, a stream is an extension subclass of the queue (``stream.pxd``): its
``publish`` and ``settle`` override the queue's C methods and its fields are C reads;
the reader's delivery loop and the page entries are extension types too.

Retention drops whole segments (``stream_log.py``, which also rebuilds the
index at startup) when a segment opens and when a policy changes; the entries
go in the same batch as the publish that opened the segment.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

from leveret.model.message import Message
from leveret.persistence.store import AccessDef
from leveret.queues import stream_arguments, stream_log, stream_tracking, ttl
from leveret.queues.entry import PublishResult, QueueEntry
from leveret.queues.queue import Queue
from leveret.queues.stream_arguments import (
    DEFAULT_SEGMENT_BYTES,
    parse_max_age,
)
from leveret.queues.stream_cache import PageCache
from leveret.queues.stream_log import StreamIndex, StreamLog
from leveret.queues.stream_reader import Reader
from leveret.queues.stream_tracking import AckWindow, TrackedOffsets

if TYPE_CHECKING:
    from leveret.persistence.store import StoredEntry
    from leveret.queues.consumer import Consumer
    from leveret.queues.host import QueueHost
    from leveret.queues.settings import QueueSettings

log = logging.getLogger(__name__)

_HELD = PublishResult.HELD


class Stream(Queue):
    """A stream queue: see the module docstring."""

    __slots__ = ("_chunk_ts", "_committed", "_index", "_pages", "_readers", "_tracked")

    def __init__(self, vhost: QueueHost | None, name: str, durable: bool = True,
                 exclusive_owner: object | None = None, auto_delete: bool = False,
                 arguments: dict[str, Any] | None = None) -> None:
        self._readers: dict[Consumer, Reader] = {}
        segment = (arguments or {}).get("x-stream-max-segment-size-bytes")
        self._index = StreamIndex(segment if isinstance(segment, int) and not isinstance(
            segment, bool) else DEFAULT_SEGMENT_BYTES)
        self._committed = 0  # offsets below it are committed: readers may deliver them
        self._chunk_ts = 0  # arrival ms of the last chunk (strictly increasing)
        self._pages = PageCache(self._read_entries,  # read once for all readers
                                lambda: [r.position for r in self._readers.values()])
        self._tracked = TrackedOffsets(vhost.name if vhost is not None else "/", name)
        super().__init__(vhost, name, durable, exclusive_owner, auto_delete, arguments)

    def __repr__(self) -> str:
        return f"<Stream {self.name!r} offsets={self.first_offset}..{self.next_offset}>"

    @property
    def what(self) -> str:
        """RabbitMQ's name for it in texts: ``queue 's' in vhost '/'``."""
        vhost = self.vhost.name if self.vhost is not None else "/"
        return f"queue '{self.name}' in vhost '{vhost}'"

    # -- what the management plane shows ------------------------------------------------

    @property
    def message_count(self) -> int:
        """Messages in the log (RabbitMQ's ``messages`` of a stream)."""
        return self._index.count

    @property
    def first_offset(self) -> int:
        return self._index.first_offset

    @property
    def next_offset(self) -> int:
        return self._index.next_offset

    @property
    def committed_offset(self) -> int:
        """Offsets below it are committed: what readers and the console may read."""
        return self._committed

    @property
    def log_index(self) -> StreamIndex:
        """The log's segments (read-only use: the management plane)."""
        return self._index

    @property
    def log_bytes(self) -> int:
        return self._index.total_bytes

    @property
    def segment_count(self) -> int:
        return len(self._index.segments)

    def consumer_offset(self, consumer: Consumer) -> int | None:
        """The next offset ``consumer`` will be given (its lag: ``next_offset`` minus it)."""
        reader = self._readers.get(consumer)
        return reader.position if reader is not None else None

    # -- settings ----------------------------------------------------------------------

    def _configure(self, old: QueueSettings | None) -> None:
        """A stream reads only its retention from its settings; other keys a policy may
        carry (TTL, length, dead-lettering) do not apply to it, as in RabbitMQ."""
        if old is not None:
            self._retain(ttl.now_ms(self.time))

    def _retain(self, now: int) -> None:
        s = self.settings
        dropped = self._index.expired(s.max_length_bytes, parse_max_age(s.max_age), now)
        stream_log = cast("StreamLog | None", self.log)
        if not dropped or stream_log is None:
            return
        stream_log.truncate(self.qid, dropped[-1].next)  # one operation, whole segments
        self._pages.drop_below(self._index.first_offset)
        log.debug("stream %r: retention dropped %d segment(s), first offset now %d",
                  self.name, len(dropped), self._index.first_offset)

    # -- appending -----------------------------------------------------------------------

    def publish(self, message: Message) -> PublishResult:
        queue_log = self.log
        assert queue_log is not None  # a stream is durable
        offset = self._next_seq
        self._next_seq = offset + 1
        batch = queue_log.batch
        new_chunk = batch != self._batch_no
        now = 0
        if new_chunk:
            now = ttl.now_ms(self.time)
            self._batch_no = batch
            self._chunk_ts = max(now, self._chunk_ts + 1)
            self._batches.append((batch, offset))
        queue_log.enqueue(self.qid, offset, message, False, self._chunk_ts)
        self._published += 1
        if self._index.append(offset, len(message.body), self._chunk_ts, new_chunk):
            self._retain(now or ttl.now_ms(self.time))
        if new_chunk:
            queue_log.after_commit(self._on_commit)
        return _HELD

    def _on_commit(self, ok: bool) -> None:
        _, start = self._batches.popleft()
        end = self._batches[0][1] if self._batches else self._next_seq
        if self.deleted:
            return
        if not ok:  # the offsets stay used; readers step over the gap
            self._dropped += end - start
            log.error("stream %r: offsets %d..%d lost to a failed store write",
                      self.name, start, end - 1)
        self._committed = max(self._committed, end)
        self._dispatch()

    def recover(self, count: int, first_seq: int, next_seq: int,
                size: int | None = None) -> None:
        """After a restart: rebuild the index from the entries on disk."""
        store = cast("StreamLog | None", self.log)
        assert store is not None
        qid = self.qid
        self._chunk_ts = stream_log.rebuild(
            self._index, lambda position, limit: store.read_stamps(qid, position, limit),
            count, first_seq, next_seq)
        self._next_seq = self._committed = self._index.next_offset

    # -- refused operations -------------------------------------------------------------

    def take(self) -> QueueEntry | None:
        raise stream_arguments.refused_operation("basic.get", self.what, (60, 70))

    def purge(self) -> int:
        """queue.purge is refused (540); a deleted stream is emptied by the store."""
        if not self.deleted:
            raise stream_arguments.refused_operation("queue.purge", self.what, (50, 30))
        count = self._index.count
        self.close()
        self._tracked.forget_all(cast("StreamLog | None", self.log))
        return count

    def close(self) -> None:
        self._readers.clear()
        self._pages.clear()

    def _read_entries(self, position: int, limit: int) -> list[StoredEntry]:
        return self.log.read_queue(self.qid, position, limit) if self.log else []

    def behind(self) -> bool:
        return False  # consumers read the log at their own pace: publishers never wait

    # -- consumers --------------------------------------------------------------------------

    def check_consumer(self, no_ack: bool, prefetch: int, global_prefetch: int,
                       arguments: Mapping[str, object]) -> None:
        """basic.consume's refusals for a stream, before consume-ok (406/540)."""
        stream_arguments.check_consume(no_ack=no_ack, prefetch=prefetch,
                                       global_prefetch=global_prefetch, arguments=arguments,
                                       what=self.what)
        stream_arguments.parse_offset(arguments.get("x-stream-offset"),
                                      ttl.now_ms(self.time), self.what)

    def add_consumer(self, consumer: Consumer) -> None:
        arguments = consumer.arguments
        spec = stream_arguments.parse_offset(arguments.get("x-stream-offset"),
                                             ttl.now_ms(self.time), self.what)
        position, min_ts = stream_log.start(self._index, spec, self._next_seq)
        window = None
        if arguments.get(stream_tracking.ARGUMENT) is True:
            floor = self._tracked.get(consumer.tag)
            if floor is not None:  # resume after what it settled, whatever x-stream-offset says
                position, min_ts = max(floor + 1, self._index.first_offset), 0
            window = AckWindow(position - 1)
        filters, match_unfiltered = stream_arguments.parse_filter(arguments)
        dispatcher = self.dispatcher
        dispatcher.had_consumer = True
        dispatcher.ring.add(consumer, False)
        if consumer.exclusive:
            dispatcher.exclusive_consumer = True
        reader = self._readers[consumer] = Reader(consumer, position, min_ts, filters,
                                                  match_unfiltered, window)
        self._pump(reader)

    def remove_consumer(self, consumer: Consumer) -> None:
        self._readers.pop(consumer, None)
        if not self._readers:
            self._pages.clear()  # nobody reads: keep nothing prepared
        ring = self.dispatcher.ring
        if consumer in ring:
            ring.remove(consumer)
        if consumer.exclusive:
            self.dispatcher.exclusive_consumer = False

    def resume(self, consumer: Consumer) -> None:
        reader = self._readers.get(consumer)
        if reader is not None:
            self._pump(reader)

    def resume_channel(self, consumers: Collection[Consumer]) -> None:
        for consumer in consumers:
            self.resume(consumer)

    def park_behind(self, consumers: Collection[Consumer]) -> None:
        return None  # readers are independent: there is no rotation to queue behind

    def _dispatch(self) -> None:
        for reader in list(self._readers.values()):
            self._pump(reader)

    def _pump(self, reader: Reader) -> None:
        """Deliver to ``reader``'s consumer what its credit allows, from the committed log."""
        consumer = reader.consumer
        ahead = reader.ahead
        while consumer.can_take() and not self.deleted:
            if not ahead:
                if reader.position >= self._committed or self.log is None:
                    return
                page, after = self._pages.entries(reader.position, self._committed,
                                                  reader.page_size())
                if not page:  # a gap (a failed write): step over it
                    reader.position = after
                    continue
                ahead.extend(page)
            if reader.plain:  # no seek, filter or tracking: deliver what credit allows
                reader.deliver_run(self.dispatcher, self, len(self._readers) > 1)
                continue
            stored = ahead.popleft()
            reader.position = stored.seq + 1
            if not reader.wants(stored):
                if reader.window is not None:
                    reader.window.skipped(stored.seq)
                continue
            if reader.window is not None:
                reader.window.delivered(stored.seq)
            reader.deliver(self.dispatcher, stored, len(self._readers) > 1)

    # -- settling: credit only ---------------------------------------------------------------

    def settle(self, entry: QueueEntry) -> None:
        self.dispatcher.unacked -= 1
        self._acked += 1
        self._track(entry)
        self.resume(entry.holder)

    def settle_many(self, entries: list[QueueEntry]) -> None:
        self.dispatcher.unacked -= len(entries)
        self._acked += len(entries)
        if any(r.window is not None for r in self._readers.values()):  # some track offsets
            for entry in entries:
                self._track(entry)

    def reject(self, entry: QueueEntry, resume: bool = True) -> None:
        self.dispatcher.unacked -= 1
        self._track(entry)
        if resume:
            self.resume(entry.holder)

    # -- offset tracking (stream_tracking.py) ----------------------------------------------

    def _track(self, entry: QueueEntry) -> None:
        """A delivery was settled for good: move its consumer's tracked offset, if tracked."""
        reader = self._readers.get(entry.holder)
        if reader is None or reader.window is None or not reader.window.settled(entry.seq):
            return
        self._tracked.moved(reader.consumer.tag, reader.window.floor,
                            None if self.deleted else cast("StreamLog | None", self.log))

    def restore_offset(self, tag: str, floor: int) -> None:
        """A tracked offset read back from the store at startup."""
        self._tracked.restore(tag, floor)

    def tracked_offsets(self) -> dict[str, int]:
        return dict(self._tracked.floors)

    def requeue(self, entry: QueueEntry) -> None:
        """A nack or reject with requeue, or a closed channel's unacked delivery: credit
        back, no redelivery."""
        self.dispatcher.unacked -= 1

    def deliver_ready(self) -> None:
        self._dispatch()

    def dispatch(self) -> None:
        """Credit may have changed anywhere (qos, flow): every reader reads on."""
        self._dispatch()

    def wake(self) -> None:
        self._dispatch()


def restore_tracked_offsets(vhosts: Mapping[str, QueueHost],
                            records: Iterable[AccessDef]) -> None:
    """Give recovered streams the tracked offsets stored for them (at startup)."""
    for record in records:
        if record.kind != stream_tracking.RECORD_KIND or len(record.key) != 3:
            continue
        vhost_name, name, tag = record.key
        vhost = vhosts.get(vhost_name)
        stream = vhost.queues.get(name) if vhost is not None else None
        offset = record.record.get("offset")
        if isinstance(stream, Stream) and isinstance(offset, int):
            stream.restore_offset(tag, offset)
