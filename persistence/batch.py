"""The pending batch: operations recorded on the loop thread, waiting to be written.

Theory of operation
-------------------
A ``Batch`` is the unit of durability, and later of replication
(``/work/shared/CLUSTER-DIRECTION.md``): a self-contained record of plain
operations (``Op``) plus a sequence number that grows by one per non-empty
batch and is stored with it, so a store knows which batch it applied last.
It refers to no live broker object: definitions are frozen ``*Def`` values,
messages are ``Message`` values; ``records.encode_batch`` turns it into bytes
and ``apply.apply_batch`` is the one function that applies it to a store.

``Recorder`` builds the batch. Operations are kept in order and applied in
order (a purge followed by an enqueue to the same queue keeps the new entry).
Two things are folded while recording, because on a busy broker most
messages are published and acked within one commit window:

* ``remove`` of an entry enqueued in the same batch cancels the enqueue: the
  entry never reaches disk, and a message all of whose entries cancel is never
  written at all (the store writes a message record only for a live enqueue);
* ``mark_delivered`` of an entry enqueued in the same batch updates the
  enqueue's delivery count instead of adding an operation;
* ``mark_delivered_below`` keeps one ``DeliveredBelow`` per queue and batch,
  raised in place: a FIFO queue's first deliveries cost no operation each.

A ``purge`` or ``delete_queue`` cancels the pending enqueues it covers.

The recorder also hands out the ids that must never repeat (message ids and
queue ids); each batch carries the next ones so the store persists them.
Definitions are checked for storability (``records.encode_definition``) when
recorded, so a bad argument is refused on the loop thread, never inside a
write.

Appliers must tolerate operations on entries that are not on disk (a remove
or mark_delivered whose enqueue was in a batch that failed): they are no-ops,
and reference counts come from the entries actually found, never from the
caller, so a failed batch cannot unbalance them. Batches must be written in
the order they were taken (group commit writes them one at a time, so they are).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from leveret.model.message import Message
from leveret.persistence.records import Definition, binding_identity, encode_definition
from leveret.persistence.store import BindingDef, QueueDef, StoreState

if TYPE_CHECKING:
    from leveret.persistence.group_commit import ConfirmSink


class Enqueue:
    """Entry (qid, seq) for ``message``. A plain class, not a dataclass: compiled, it is an
    extension type (``batch.pxd``) that the recorder builds and the writer reads as C."""

    __slots__ = ("cancelled", "delivery_count", "expires_at", "message", "qid", "seq",
                 "transient")

    def __init__(self, qid: int, seq: int, message: Message, delivery_count: int = 0,
                 transient: bool = False, cancelled: bool = False, expires_at: int = 0) -> None:
        self.qid = qid
        self.seq = seq
        self.message = message
        self.delivery_count = delivery_count
        self.transient = transient
        self.cancelled = cancelled
        self.expires_at = expires_at  # absolute wall-clock ms of its TTL expiry; 0 = never

    def __repr__(self) -> str:
        return (f"Enqueue(qid={self.qid}, seq={self.seq}, delivery_count={self.delivery_count},"
                f" transient={self.transient}, cancelled={self.cancelled},"
                f" expires_at={self.expires_at})")


@dataclass(slots=True)
class MarkDelivered:
    qid: int
    seq: int
    delivery_count: int
    cancelled: bool = False


@dataclass(slots=True)
class DeliveredBelow:
    """Every entry of the queue with seq < ``below`` was delivered at least once.

    A FIFO queue delivers in seq order (requeued entries return to their place), so
    one number per queue records what a mark per entry would: stores keep the highest
    and report ``delivery_count`` >= 1 below it (``redelivered`` after a restart, as
    RabbitMQ's queue index does). Priority queues deliver out of seq order and keep
    marking each entry; so does every redelivery (the count matters to a delivery limit)."""

    qid: int
    below: int
    cancelled: bool = False


class Remove:
    """Entry (qid, seq) is gone (an ack); an extension type when compiled, as ``Enqueue``."""

    __slots__ = ("qid", "seq")

    def __init__(self, qid: int, seq: int) -> None:
        self.qid = qid
        self.seq = seq

    def __repr__(self) -> str:
        return f"Remove(qid={self.qid}, seq={self.seq})"


@dataclass(slots=True)
class Purge:
    qid: int
    from_seq: int


@dataclass(slots=True)
class Truncate:
    """Remove the queue's entries with seq < ``below`` (a stream's retention: whole
    segments, one operation however many entries)."""

    qid: int
    below: int


@dataclass(slots=True)
class DeleteQueue:
    """Drop the queue's definition (if it still has this qid), its entries and the bindings to it."""

    vhost: str
    name: str
    qid: int


@dataclass(slots=True)
class DeleteExchange:
    """Drop the exchange's definition and the bindings from or to it."""

    vhost: str
    name: str


@dataclass(slots=True)
class PutDefinition:
    """Add or replace an exchange, queue, binding or policy."""

    definition: Definition


@dataclass(slots=True)
class DeleteDefinition:
    kind: str  # records.KINDS: "x" | "q" | "b" | "p"
    identity: tuple[str, ...]


class Floored(Protocol):
    """A window whose oldest places are gone: every place below ``floor`` was evicted."""

    @property
    def floor(self) -> int: ...


@dataclass(slots=True)
class DedupeAppend:
    """A deduplication window's changes in one batch, folded into one operation: keys added
    in order (the first has place ``first`` in the window, the next ``first + 1``, ...), each
    with its expiry (wall-clock ms, 0: until evicted), and every key placed below ``floor``
    gone (evicted: the window is FIFO, so its evictions are a range). ``scope`` names the
    window (``records.dedupe_scope``). ``window``: the loop's window, whose floor the batch
    takes when it is taken (``Recorder.take_batch``), instead of one store a publish; the
    batch then lets go of it (the writer never reads it)."""

    scope: bytes
    first: int
    keys: list[bytes] = field(default_factory=list)
    expires: list[int] = field(default_factory=list)
    floor: int = 0
    window: Floored | None = None


@dataclass(slots=True)
class DropDedupe:
    """The window is gone (its exchange was deleted): every key of ``scope``."""

    scope: bytes


Op = (Enqueue | MarkDelivered | DeliveredBelow | Remove | Purge | Truncate | DeleteQueue
      | DeleteExchange | PutDefinition | DeleteDefinition | DedupeAppend | DropDedupe)


@dataclass(slots=True)
class Batch:
    ops: list[Op] = field(default_factory=list)
    next_msg_id: int = 1  # to persist: ids below it may have been handed out
    next_qid: int = 1
    live: int = 0  # ops not cancelled; 0 means there is nothing to write
    seq: int = 0  # 1, 2, 3... per non-empty batch (0: empty, nothing to apply)


# Message ids: a 56-bit counter under a one-byte cluster (``Recorder.enqueue``).
CLUSTER_SHIFT = 56
# A queue's sequence numbers: a 48-bit counter, under a cluster in a priority queue (its
# level: ``priority_store``), so that each level's index entries are contiguous too. Stores
# count ``next_seq`` on the counter part.
SEQ_CLUSTER_SHIFT = 48
SEQ_MASK = (1 << SEQ_CLUSTER_SHIFT) - 1


class Recorder:
    """Builds the pending batch (loop thread only); ``take_batch`` detaches it.

    Every recorded operation is counted (``_recorded_ops``), and while no write is
    scheduled or running, subclasses are asked for one through ``_wanted`` (group commit
    schedules its write there): once per batch, not once per operation. The publisher
    confirms waiting for the pending batch are kept here too (``hold``), so that a
    confirmed persistent publish is two C calls when compiled (``batch.pxd``); group commit
    releases them.
    """

    def __init__(self, state: StoreState | None = None) -> None:
        state = state or StoreState()
        self.next_msg_id = state.next_msg_id
        self.next_qid = state.next_qid
        self.last_seq = state.last_seq
        self._qids = dict(state.qids)  # (vhost, name) -> qid, pending included
        self._ops: list[Op] = []
        self._live = 0
        # The entry's one live operation in this batch (an enqueue, or a mark of an entry
        # enqueued earlier), by (qid, seq), for folding: one dict, one lookup per call.
        self._pending: dict[tuple[int, int], Enqueue | MarkDelivered] = {}
        self._below: dict[int, DeliveredBelow] = {}  # this batch's, by qid
        self._dedupe: dict[bytes, DedupeAppend] = {}  # this batch's, by window
        self._recorded_ops = 0  # operations recorded since the last batch was taken
        self._scheduled = False  # a write of the pending batch is scheduled (group commit)
        self._writing = False  # a batch is being written (group commit)
        # Confirm seqs each channel holds for the next commit: released as one list per
        # channel, so a batch of 50,000 confirms costs a few calls, not 50,000.
        self._held: dict[ConfirmSink, list[int]] = {}
        # How many batches were taken: what is recorded now goes out in batch ``batch + 1``
        # (group commit counts them, and releases that batch's after_commit callbacks
        # with its ``ok``). A C field compiled: a deduplicating window reads it a publish.
        self.batch = 0

    def _recorded(self, count: int = 1) -> None:
        """After each operation (or run of ``count``) added to the batch."""
        self._recorded_ops += count
        if not self._scheduled and not self._writing:
            self._wanted()

    def _wanted(self) -> None:
        """Operations wait and no write is scheduled or running (group commit's hook)."""

    def hold(self, channel: ConfirmSink, seq: int) -> None:
        """Release publisher confirm ``seq`` of ``channel`` after the next commit."""
        seqs = self._held.get(channel)
        if seqs is None:
            self._held[channel] = [seq]
        else:
            seqs.append(seq)

    def has_pending(self) -> bool:
        return self._live > 0

    def take_batch(self) -> Batch:
        seq = 0
        if self._live:
            seq = self.last_seq = self.last_seq + 1
        batch = Batch(self._ops, self.next_msg_id, self.next_qid, self._live, seq)
        self._ops = []
        self._live = 0
        self._pending = {}
        self._below = {}
        if self._dedupe:
            for op in self._dedupe.values():  # a window's evictions up to now
                window = op.window
                if window is not None:
                    op.floor = window.floor
                    op.window = None
            self._dedupe = {}
        return batch

    def _add(self, op: Op) -> None:
        self._ops.append(op)
        self._live += 1
        self._recorded()

    # -- queue entries (the hot path) ------------------------------------------------

    def enqueue(self, qid: int, seq: int, message: Message, transient: bool = False,
                expires_at: int = 0, cluster: int = 0) -> None:
        """Add entry (qid, seq) for ``message``, assigning its ``store_id`` if new.

        ``cluster`` (0-255) goes in the id's top byte: the store keeps message records in
        id order, so a priority queue clusters each level's messages (``priority_store``)
        and draining a level empties whole pages instead of rewriting one page a message."""
        if message.store_id == 0:
            message.store_id = (cluster << CLUSTER_SHIFT) | self.next_msg_id
            self.next_msg_id += 1
        key = (qid, seq)
        pending = self._pending
        if key in pending:
            self._cancel(key)  # a re-used (qid, seq) replaces the entry
        op = Enqueue(qid, seq, message, 0, transient, False, expires_at)
        pending[key] = op  # before _recorded: a synchronous write takes the batch there
        self._ops.append(op)  # _add, without its call: one per persistent message
        self._live += 1
        self._recorded()

    def mark_delivered(self, qid: int, seq: int, message: Message, delivery_count: int) -> None:
        """Persist an entry's delivery count (its ``redelivered`` flag after a restart)."""
        key = (qid, seq)
        pending = self._pending.get(key)
        if pending is not None:
            pending.delivery_count = delivery_count
            return
        op = self._pending[key] = MarkDelivered(qid, seq, delivery_count)
        self._add(op)

    def mark_delivered_below(self, qid: int, below: int) -> None:
        """Entries of a FIFO queue with seq < ``below`` were delivered (``DeliveredBelow``)."""
        op = self._below.get(qid)
        if op is None:
            op = self._below[qid] = DeliveredBelow(qid, below)
            self._add(op)
        elif below > op.below:
            op.below = below

    def remove(self, qid: int, seq: int, message: Message | None = None) -> None:
        """The entry is gone (acked, rejected, dropped); the message goes with its last entry."""
        pending = self._pending.pop((qid, seq), None)
        if pending is not None:
            pending.cancelled = True
            self._live -= 1
            if type(pending) is Enqueue:
                return  # never reached disk: nothing to remove
        self._add(Remove(qid, seq))

    def remove_many(self, qid: int, seqs: list[int]) -> None:
        """``remove`` of each of ``seqs`` (a multiple ack), with one call: same folding,
        same operations, in the same order."""
        pending = self._pending
        ops = self._ops
        added = 0
        for seq in seqs:
            op = pending.pop((qid, seq), None) if pending else None
            if op is not None:
                op.cancelled = True
                self._live -= 1
                if type(op) is Enqueue:
                    continue
            ops.append(Remove(qid, seq))
            added += 1
        if added:
            self._live += added
            self._recorded(added)

    def purge(self, qid: int, from_seq: int = 0) -> None:
        """Remove the queue's entries with seq >= from_seq (a purge drops the paged tail;
        entries of unacked deliveries, which are older, stay until settled)."""
        self._cancel_queue(qid, from_seq)
        self._add(Purge(qid, from_seq))

    def truncate(self, qid: int, below: int) -> None:
        """Remove the queue's entries with seq < ``below`` (``Truncate``)."""
        keys = [k for k in self._pending if k[0] == qid and k[1] < below]
        for key in keys:
            self._cancel(key)
        self._add(Truncate(qid, below))

    # -- definitions ---------------------------------------------------------------------

    def put_definition(self, definition: Definition) -> None:
        """Record an exchange, binding, policy or access record (queues: ``put_queue``)."""
        encode_definition(definition)  # raises StoreError now, not inside a write
        self._add(PutDefinition(definition))

    def put_queue(self, queue: QueueDef) -> int:
        """Record a durable queue; returns its qid (stable across restarts)."""
        key = (queue.vhost, queue.name)
        qid = self._qids.get(key, self.next_qid)
        queue = replace(queue, qid=qid)
        encode_definition(queue)  # may raise: allocate after
        if qid == self.next_qid:
            self._qids[key] = qid
            self.next_qid += 1
        self._add(PutDefinition(queue))
        return qid

    def delete_exchange(self, vhost: str, name: str) -> None:
        self._add(DeleteExchange(vhost, name))

    def delete_queue(self, vhost: str, name: str, qid: int) -> None:
        """Forget the queue and every entry it has on disk (the store writes the entries off
        after this batch, in slices of their own: ``lmdb_drops``; a deleted queue's purge
        records no removals, ``ready.purge_ready``)."""
        if self._qids.get((vhost, name)) == qid:
            del self._qids[vhost, name]
        self._cancel_queue(qid, 0)
        below = self._below.pop(qid, None)
        if below is not None:
            below.cancelled = True
            self._live -= 1
        self._add(DeleteQueue(vhost, name, qid))

    # -- deduplication windows -----------------------------------------------------------

    def append_dedupe(self, scope: bytes, order: int, key: bytes, expires_at: int,
                      floor: int) -> None:
        """A durable window took ``key`` at place ``order`` and holds nothing below ``floor``
        now; recorded in the batch of the enqueue it admitted, folded into one
        ``DedupeAppend`` per window and batch (one list append per publish)."""
        op = self._dedupe.get(scope)
        fresh = op is None or op.first + len(op.keys) != order
        if fresh:
            op = self._dedupe[scope] = DedupeAppend(scope, order)
        assert op is not None
        op.keys.append(key)
        op.expires.append(expires_at)
        op.floor = floor
        if fresh:  # added once filled: a synchronous log writes it at once
            self._add(op)

    def dedupe_op(self, scope: bytes, order: int) -> DedupeAppend:
        """The pending batch's ``DedupeAppend`` for window ``scope``, to which a deferred log's
        window appends its keys from place ``order`` on itself until the batch is taken
        (``broker/dedupe.py``): a publish then costs two list appends, no call here."""
        op = self._dedupe.get(scope)
        if op is None or op.first + len(op.keys) != order:
            op = self._dedupe[scope] = DedupeAppend(scope, order)
            self._add(op)
        return op

    def drop_dedupe(self, scope: bytes) -> None:
        self._dedupe.pop(scope, None)  # applied in order: the drop comes after its appends
        self._add(DropDedupe(scope))

    def delete_binding(self, binding: BindingDef) -> None:
        self._add(DeleteDefinition("b", binding_identity(binding)))

    def delete_policy(self, vhost: str, name: str) -> None:
        self._add(DeleteDefinition("p", (vhost, name)))

    def delete_access(self, kind: str, key: tuple[str, ...]) -> None:
        """Forget a user, vhost, permission or topic permission (``AccessDef``)."""
        self._add(DeleteDefinition("a", (kind, *key)))

    # -- folding ----------------------------------------------------------------------------

    def _cancel(self, key: tuple[int, int]) -> None:
        pending = self._pending.pop(key, None)
        if pending is not None:
            pending.cancelled = True
            self._live -= 1

    def _cancel_queue(self, qid: int, from_seq: int) -> None:
        keys = [k for k in self._pending if k[0] == qid and k[1] >= from_seq]
        for key in keys:
            self._cancel(key)

