"""In-memory store: the ``Store`` contract in plain dicts; nothing survives the process.

Batches are recorded by ``batch.Recorder`` and applied by ``apply.apply_batch``,
as for the LMDB store; this module only says what the primitives do to its
dicts. ``write_batch`` applies a batch under a lock, and reads take the same
lock, so a batch written from a worker thread is seen whole or not at all,
exactly as with a database transaction.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from itertools import takewhile

from leveret.model.message import Message
from leveret.persistence.apply import apply_batch
from leveret.persistence.batch import SEQ_MASK, Batch, DedupeAppend, Enqueue
from leveret.persistence.records import Definition
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
    StoreSpace,
    StoreState,
)

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


class MemoryStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        # Committed state (written under _lock).
        self._defs: dict[tuple[str, tuple[str, ...]], Definition] = {}
        self._messages: dict[int, Message] = {}
        self._refs: dict[int, int] = {}
        self._entries: dict[int, _Entries] = {}
        self._next_seq: dict[int, int] = {}
        # Per queue: [body bytes, transient entries, their body bytes], as LMDB's counters.
        self._sizes: dict[int, list[int]] = {}
        self._below: dict[int, int] = {}  # qid -> delivered below (batch.DeliveredBelow)
        # Deduplication windows: scope -> order -> (key, expires_at).
        self._dedupe: dict[bytes, dict[int, tuple[bytes, int]]] = {}
        self._state = StoreState()

    def state(self) -> StoreState:
        with self._lock:
            qids = {(d.vhost, d.name): d.qid for d in self._defs.values()
                    if isinstance(d, QueueDef)}
            return StoreState(self._state.next_msg_id, self._state.next_qid,
                              self._state.last_seq, qids)

    # -- definitions ------------------------------------------------------------------

    def load_definitions(self) -> Definitions:
        with self._lock:
            defs = list(self._defs.values())
        return Definitions([d for d in defs if isinstance(d, ExchangeDef)],
                           [d for d in defs if isinstance(d, QueueDef)],
                           [d for d in defs if isinstance(d, BindingDef)],
                           [d for d in defs if isinstance(d, PolicyDef)],
                           [d for d in defs if isinstance(d, AccessDef)])

    # -- reads ------------------------------------------------------------------------------

    def queue_stats(self, qid: int) -> QueueStats:
        with self._lock:
            entries = self._entries.get(qid)
            if entries is None or not entries.by_seq:
                return QueueStats(0, 0, self._next_seq.get(qid, 0))
            size, transient, transient_bytes = self._sizes[qid]
            return QueueStats(len(entries.by_seq), next(entries.seqs_from(0), 0),
                              self._next_seq.get(qid, 0), size, transient, transient_bytes)

    def read_queue(self, qid: int, from_seq: int, limit: int) -> list[StoredEntry]:
        out: list[StoredEntry] = []
        with self._lock:
            entries = self._entries.get(qid)
            if entries is None or limit <= 0:
                return out
            below = self._below.get(qid, 0)
            for seq in entries.seqs_from(from_seq):
                msg_id, deliveries, _, expires_at = entries.by_seq[seq]
                deliveries = deliveries or int(seq < below)
                out.append(StoredEntry(seq, deliveries, self._messages[msg_id], expires_at))
                if len(out) >= limit:
                    break
        return out

    def read_stamps(self, qid: int, from_seq: int, limit: int) -> list[tuple[int, int, int]]:
        out: list[tuple[int, int, int]] = []
        with self._lock:
            entries = self._entries.get(qid)
            if entries is None or limit <= 0:
                return out
            for seq in entries.seqs_from(from_seq):
                msg_id, _, _, expires_at = entries.by_seq[seq]
                out.append((seq, expires_at, len(self._messages[msg_id].body)))
                if len(out) >= limit:
                    break
        return out

    def read_entries(self, qid: int, seqs: Sequence[int]) -> list[StoredEntry]:
        out: list[StoredEntry] = []
        with self._lock:
            entries = self._entries.get(qid)
            if entries is None:
                return out
            below = self._below.get(qid, 0)
            for seq in seqs:
                found = entries.by_seq.get(seq)
                if found is not None:
                    msg_id, deliveries, _, expires_at = found
                    deliveries = deliveries or int(seq < below)
                    out.append(StoredEntry(seq, deliveries, self._messages[msg_id], expires_at))
        return out

    def load_dedupe(self, scope: bytes) -> list[tuple[bytes, int, int]]:
        with self._lock:
            keys = self._dedupe.get(scope, {})
            return [(keys[o][0], o, keys[o][1]) for o in sorted(keys)]

    # -- writes ---------------------------------------------------------------------------

    def write_batch(self, batch: Batch) -> None:
        if self._closed:
            raise StoreError("memory store: closed")
        if batch.live == 0:
            return
        with self._lock:
            apply_batch(batch, self)
            self._state = StoreState(max(self._state.next_msg_id, batch.next_msg_id),
                                     max(self._state.next_qid, batch.next_qid),
                                     max(self._state.last_seq, batch.seq))

    reclaiming = False  # drop_queue removes a deleted queue's entries at once

    def reclaim(self) -> None:
        pass

    def close(self) -> None:
        self._closed = True

    def space(self) -> StoreSpace:
        return StoreSpace()  # takes no disk

    def file_bytes(self) -> int:
        return 0

    def compact_copy(self) -> None:
        return None

    def compact_swap(self, copy: None) -> None:
        pass

    # -- the apply.Applier primitives (under _lock) ----------------------------------------

    def put_entry(self, op: Enqueue) -> None:
        entries = self._entries.get(op.qid)
        if entries is None:
            entries = self._entries[op.qid] = _Entries()
        msg_id = op.message.store_id
        refs = self._refs.get(msg_id, 0)
        if refs == 0:
            self._messages[msg_id] = op.message
        self._refs[msg_id] = refs + 1
        old = entries.put(op.seq, (msg_id, op.delivery_count, op.transient, op.expires_at))
        if old is not None:
            self._forget(op.qid, old)
        self._count(op.qid, len(op.message.body), op.transient, 1)
        self._next_seq[op.qid] = max(self._next_seq.get(op.qid, 0), (op.seq & SEQ_MASK) + 1)

    def remove_entry(self, qid: int, seq: int) -> None:
        entries = self._entries.get(qid)
        entry = entries.pop(seq) if entries else None
        if entry is not None:
            self._forget(qid, entry)

    def set_delivery_count(self, qid: int, seq: int, delivery_count: int) -> None:
        entries = self._entries.get(qid)
        if entries and seq in entries.by_seq:
            msg_id, _, transient, expires_at = entries.by_seq[seq]
            entries.by_seq[seq] = (msg_id, delivery_count, transient, expires_at)

    def set_delivered_below(self, qid: int, below: int) -> None:
        self._below[qid] = max(self._below.get(qid, 0), below)

    def remove_entries(self, qid: int, from_seq: int) -> None:
        entries = self._entries.get(qid)
        if entries is None:
            return
        for seq in list(entries.seqs_from(from_seq)):
            entry = entries.pop(seq)
            assert entry is not None
            self._forget(qid, entry)

    def remove_entries_below(self, qid: int, below: int) -> None:
        entries = self._entries.get(qid)
        if entries is None:
            return
        for seq in list(takewhile(lambda s: s < below, entries.seqs_from(0))):
            entry = entries.pop(seq)
            assert entry is not None
            self._forget(qid, entry)

    def drop_queue(self, qid: int) -> None:
        self.remove_entries(qid, 0)  # at once: in memory there is no commit to hold up
        self._entries.pop(qid, None)
        self._next_seq.pop(qid, None)
        self._sizes.pop(qid, None)
        self._below.pop(qid, None)

    def get_definition(self, kind: str, identity: tuple[str, ...]) -> Definition | None:
        return self._defs.get((kind, identity))

    def put_definition(self, kind: str, identity: tuple[str, ...],
                       definition: Definition) -> None:
        self._defs[kind, identity] = definition

    def delete_definition(self, kind: str, identity: tuple[str, ...]) -> None:
        self._defs.pop((kind, identity), None)

    def append_dedupe(self, op: DedupeAppend) -> None:
        window = self._dedupe.setdefault(op.scope, {})
        for i, (key, expires) in enumerate(zip(op.keys, op.expires, strict=True)):
            window[op.first + i] = (key, expires)
        for order in [o for o in window if o < op.floor]:
            del window[order]

    def drop_dedupe(self, scope: bytes) -> None:
        self._dedupe.pop(scope, None)

    def bindings(self) -> list[BindingDef]:
        return [d for (kind, _), d in self._defs.items() if kind == "b"]  # type: ignore[misc]

    def _count(self, qid: int, size: int, transient: bool, sign: int) -> None:
        sizes = self._sizes.setdefault(qid, [0, 0, 0])
        sizes[0] += sign * size
        if transient:
            sizes[1] += sign
            sizes[2] += sign * size

    def _forget(self, qid: int, entry: tuple[int, int, bool, int]) -> None:
        """An entry leaves its queue (before its message may go with it)."""
        self._count(qid, len(self._messages[entry[0]].body), entry[2], -1)
        self._decref(entry[0])

    def _decref(self, msg_id: int) -> None:
        refs = self._refs[msg_id] - 1
        if refs:
            self._refs[msg_id] = refs
        else:
            del self._refs[msg_id]
            del self._messages[msg_id]

    # -- test introspection -----------------------------------------------------------------

    def _message_count(self) -> int:
        with self._lock:
            return len(self._messages)
