"""In-memory store: the ``Store`` contract in plain dicts; nothing survives the process.

Recording is shared with the LMDB store (``batch.Recorder``), so both fold a
batch the same way; ``write_batch`` applies it to the dicts under a lock, and
reads take the same lock, so a batch written from a worker thread is seen
whole or not at all, exactly as with a database transaction.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from leveret.persistence.batch import (
    Batch,
    DeleteDef,
    DeleteExchange,
    DeleteQueue,
    Enqueue,
    MarkDelivered,
    Purge,
    PutDef,
    Recorder,
    RecordingStore,
    Remove,
)
from leveret.persistence.records import encode_definition
from leveret.persistence.store import (
    AccessDef,
    BindingDef,
    Definitions,
    ExchangeDef,
    PolicyDef,
    QueueDef,
    QueueStats,
    StoredEntry,
    StoreError,
)
from leveret.model.message import Message

# Lazily deleted seqs are compacted away once they outnumber the live ones
# (and are more than this many, so small queues never bother).
_COMPACT_MIN_DEAD = 64


class _Entries:
    """One queue's entries in seq order: a dict plus a sorted seq list with lazy deletion.

    Seqs are normally appended in increasing order, so put is O(1); remove only
    counts a dead slot; reads bisect to ``from_seq``.
    """

    __slots__ = ("by_seq", "dead", "order")

    def __init__(self) -> None:
        # seq -> (msg id, deliveries, transient, expires_at)
        self.by_seq: dict[int, tuple[int, int, bool, int]] = {}
        self.order: list[int] = []
        self.dead = 0

    def put(self, seq: int, entry: tuple[int, int, bool, int]) -> tuple[int, int, bool, int] | None:
        old = self.by_seq.get(seq)
        if old is None:
            order = self.order
            if not order or seq > order[-1]:
                order.append(seq)
            else:
                i = bisect_left(order, seq)
                if i < len(order) and order[i] == seq:
                    self.dead -= 1  # a dead slot comes back to life
                else:
                    order.insert(i, seq)
        self.by_seq[seq] = entry
        return old

    def pop(self, seq: int) -> tuple[int, int, bool, int] | None:
        entry = self.by_seq.pop(seq, None)
        if entry is not None:
            self.dead += 1
            if self.dead > _COMPACT_MIN_DEAD and self.dead > len(self.by_seq):
                self.order = [s for s in self.order if s in self.by_seq]
                self.dead = 0
        return entry

    def seqs_from(self, from_seq: int) -> Iterator[int]:
        order = self.order
        for i in range(bisect_left(order, from_seq), len(order)):
            if order[i] in self.by_seq:
                yield order[i]


class MemoryStore(RecordingStore):
    def __init__(self) -> None:
        self._recorder = Recorder()
        self._qids: dict[tuple[str, str], int] = {}  # loop thread's view, pending included
        self._lock = threading.Lock()
        self._closed = False
        # Committed state (written under _lock).
        self._defs: dict[tuple[str, tuple[str, ...]], Any] = {}
        self._messages: dict[int, Message] = {}
        self._refs: dict[int, int] = {}
        self._entries: dict[int, _Entries] = {}
        self._next_seq: dict[int, int] = {}

    # -- definitions ------------------------------------------------------------------

    def load_definitions(self) -> Definitions:
        with self._lock:
            defs = list(self._defs.values())
        return Definitions([d for d in defs if isinstance(d, ExchangeDef)],
                           [d for d in defs if isinstance(d, QueueDef)],
                           [d for d in defs if isinstance(d, BindingDef)],
                           [d for d in defs if isinstance(d, PolicyDef)],
                           [d for d in defs if isinstance(d, AccessDef)])


    def _definition(self, definition: Any) -> Any:
        encode_definition(definition)  # rejects what the LMDB store could not keep either
        return definition

    # -- queue entries ------------------------------------------------------------------

    # -- reads ------------------------------------------------------------------------------

    def queue_stats(self, qid: int) -> QueueStats:
        with self._lock:
            entries = self._entries.get(qid)
            count = len(entries.by_seq) if entries else 0
            first = next(entries.seqs_from(0), 0) if entries else 0
            return QueueStats(count, first, self._next_seq.get(qid, 0))

    def read_queue(self, qid: int, from_seq: int, limit: int) -> list[StoredEntry]:
        out: list[StoredEntry] = []
        with self._lock:
            entries = self._entries.get(qid)
            if entries is None or limit <= 0:
                return out
            for seq in entries.seqs_from(from_seq):
                msg_id, deliveries, _, expires_at = entries.by_seq[seq]
                out.append(StoredEntry(seq, deliveries, self._messages[msg_id], expires_at))
                if len(out) >= limit:
                    break
        return out

    # -- group commit ---------------------------------------------------------------------

    def write_batch(self, batch: Batch) -> None:
        if self._closed:
            raise StoreError("memory store: closed")
        if batch.live == 0:
            return
        with self._lock:
            for op in batch.ops:
                self._apply(op)

    def close(self) -> None:
        self._closed = True

    # -- applying (under _lock) --------------------------------------------------------

    def _apply(self, op: Any) -> None:
        cls = type(op)
        if cls is Enqueue:
            if op.cancelled:
                return
            entries = self._entries.get(op.qid)
            if entries is None:
                entries = self._entries[op.qid] = _Entries()
            msg_id = op.message.store_id
            self._incref(msg_id, op.message)
            old = entries.put(op.seq, (msg_id, op.delivery_count, op.transient, op.expires_at))
            if old is not None:
                self._decref(old[0])
            self._next_seq[op.qid] = max(self._next_seq.get(op.qid, 0), op.seq + 1)
        elif cls is Remove:
            entries = self._entries.get(op.qid)
            entry = entries.pop(op.seq) if entries else None
            if entry is not None:
                self._decref(entry[0])
        elif cls is MarkDelivered:
            entries = self._entries.get(op.qid)
            if not op.cancelled and entries and op.seq in entries.by_seq:
                msg_id, _, transient, expires_at = entries.by_seq[op.seq]
                entries.by_seq[op.seq] = (msg_id, op.delivery_count, transient, expires_at)
        elif cls is Purge:
            self._purge(op.qid, op.from_seq)
        elif cls is DeleteQueue:
            self._purge(op.qid, 0)
            self._entries.pop(op.qid, None)
            self._next_seq.pop(op.qid, None)
            if getattr(self._defs.get(("q", (op.vhost, op.name))), "qid", None) == op.qid:
                del self._defs["q", (op.vhost, op.name)]
            self._drop_bindings(lambda b: b.vhost == op.vhost and b.destination_type == "queue"
                                and b.destination == op.name)
        elif cls is DeleteExchange:
            self._defs.pop(("x", (op.vhost, op.name)), None)
            self._drop_bindings(lambda b: b.vhost == op.vhost and (b.source == op.name or (
                b.destination_type == "exchange" and b.destination == op.name)))
        elif cls is PutDef:
            self._defs[op.kind, op.identity] = op.payload
        elif cls is DeleteDef:
            self._defs.pop((op.kind, op.identity), None)

    def _incref(self, msg_id: int, message: Message) -> None:
        refs = self._refs.get(msg_id, 0)
        if refs == 0:
            self._messages[msg_id] = message
        self._refs[msg_id] = refs + 1

    def _decref(self, msg_id: int) -> None:
        refs = self._refs[msg_id] - 1
        if refs:
            self._refs[msg_id] = refs
        else:
            del self._refs[msg_id]
            del self._messages[msg_id]

    def _purge(self, qid: int, from_seq: int) -> None:
        entries = self._entries.get(qid)
        if entries is None:
            return
        for seq in list(entries.seqs_from(from_seq)):
            entry = entries.pop(seq)
            assert entry is not None
            self._decref(entry[0])

    def _drop_bindings(self, matches: Any) -> None:
        doomed = [k for k, d in self._defs.items() if k[0] == "b" and matches(d)]
        for key in doomed:
            del self._defs[key]

    # -- test introspection -----------------------------------------------------------------

    def _message_count(self) -> int:
        with self._lock:
            return len(self._messages)
