"""The pending batch: what the loop thread recorded, waiting for ``write_batch``.

Shared by every store so that they agree on batch semantics. Operations are
kept in order and applied in order (a purge followed by an enqueue to the same
queue keeps the new entry). Two things are folded while recording, because on
a busy broker most messages are published and acked within one commit window:

* ``remove`` of an entry enqueued in the same batch cancels the enqueue: the
  entry never reaches disk, and a message all of whose entries cancel is never
  written at all (the store writes a message record only for a live enqueue);
* ``mark_delivered`` of an entry enqueued in the same batch updates the
  enqueue's delivery count instead of adding an operation.

A ``purge`` or ``delete_queue`` cancels the pending enqueues it covers.

Appliers must tolerate operations on entries that are not on disk (a remove
or mark_delivered whose enqueue was in a batch that failed): they are no-ops,
and reference counts come from the entries actually found, never from the
caller, so a failed batch cannot unbalance them.

Batches must be written in the order they were taken (group commit writes
them one at a time, so they are).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from leveret.persistence.records import binding_identity
from leveret.persistence.store import AccessDef, BindingDef, ExchangeDef, PolicyDef, QueueDef
from leveret.model.message import Message


@dataclass(slots=True)
class Enqueue:
    qid: int
    seq: int
    message: Message
    delivery_count: int = 0
    transient: bool = False
    cancelled: bool = False
    expires_at: int = 0  # absolute wall-clock ms of its TTL expiry; 0 = never


@dataclass(slots=True)
class MarkDelivered:
    qid: int
    seq: int
    delivery_count: int
    cancelled: bool = False


@dataclass(slots=True)
class Remove:
    qid: int
    seq: int


@dataclass(slots=True)
class Purge:
    qid: int
    from_seq: int


@dataclass(slots=True)
class DeleteQueue:
    """Drop the queue's definition, every entry it has and the bindings to it."""

    vhost: str
    name: str
    qid: int


@dataclass(slots=True)
class DeleteExchange:
    """Drop the exchange's definition and the bindings from or to it."""

    vhost: str
    name: str


@dataclass(slots=True)
class PutDef:
    kind: str  # "x" | "q" | "b"
    identity: tuple[str, ...]
    payload: Any  # whatever the store keeps (the def itself, or its encoding)


@dataclass(slots=True)
class DeleteDef:
    kind: str
    identity: tuple[str, ...]


Op = Enqueue | MarkDelivered | Remove | Purge | DeleteQueue | DeleteExchange | PutDef | DeleteDef


@dataclass(slots=True)
class Batch:
    ops: list[Op] = field(default_factory=list)
    next_msg_id: int = 1  # to persist: ids below it may have been handed out
    next_qid: int = 1
    live: int = 0  # ops not cancelled; 0 means there is nothing to write


class Recorder:
    """Builds the pending batch (loop thread only)."""

    def __init__(self, next_msg_id: int = 1, next_qid: int = 1) -> None:
        self.next_msg_id = next_msg_id
        self.next_qid = next_qid
        self._ops: list[Op] = []
        self._live = 0
        # Entries enqueued / marked in this batch, by (qid, seq), for folding.
        self._enqueued: dict[tuple[int, int], Enqueue] = {}
        self._delivered: dict[tuple[int, int], MarkDelivered] = {}

    def has_pending(self) -> bool:
        return self._live > 0

    def take(self) -> Batch:
        batch = Batch(self._ops, self.next_msg_id, self.next_qid, self._live)
        self._ops = []
        self._live = 0
        self._enqueued = {}
        self._delivered = {}
        return batch

    def add(self, op: Op) -> None:
        self._ops.append(op)
        self._live += 1

    def enqueue(self, qid: int, seq: int, message: Message, transient: bool,
                expires_at: int = 0) -> None:
        if message.store_id == 0:
            message.store_id = self.next_msg_id
            self.next_msg_id += 1
        key = (qid, seq)
        if key in self._enqueued or key in self._delivered:
            self._cancel(key)  # a re-used (qid, seq) replaces the entry
        op = Enqueue(qid, seq, message, 0, transient, False, expires_at)
        self._enqueued[key] = op
        self.add(op)

    def mark_delivered(self, qid: int, seq: int, delivery_count: int) -> None:
        key = (qid, seq)
        pending = self._enqueued.get(key) or self._delivered.get(key)
        if pending is not None:
            pending.delivery_count = delivery_count
            return
        op = MarkDelivered(qid, seq, delivery_count)
        self._delivered[key] = op
        self.add(op)

    def remove(self, qid: int, seq: int) -> None:
        key = (qid, seq)
        if key in self._enqueued:
            self._cancel(key)  # never reached disk: nothing to remove
            return
        self._cancel(key)
        self.add(Remove(qid, seq))

    def purge(self, qid: int, from_seq: int) -> None:
        self._cancel_queue(qid, from_seq)
        self.add(Purge(qid, from_seq))

    def delete_queue(self, vhost: str, name: str, qid: int) -> None:
        self._cancel_queue(qid, 0)
        self.add(DeleteQueue(vhost, name, qid))

    def _cancel(self, key: tuple[int, int]) -> None:
        for pending in (self._enqueued.pop(key, None), self._delivered.pop(key, None)):
            if pending is not None:
                pending.cancelled = True
                self._live -= 1

    def _cancel_queue(self, qid: int, from_seq: int) -> None:
        keys = [k for k in (*self._enqueued, *self._delivered) if k[0] == qid and k[1] >= from_seq]
        for key in keys:
            self._cancel(key)


class RecordingStore:
    """The part both stores share: every change goes to the pending batch
    (``self._recorder``), which ``take_batch`` detaches for ``write_batch``.

    A store says only what a definition becomes in its batch (``_definition``:
    encoded bytes for LMDB, the object itself in memory) and keeps ``_qids``,
    the queue ids it has handed out.
    """

    _recorder: Recorder
    _qids: dict[tuple[str, str], int]

    def _definition(self, definition: Any) -> Any:
        raise NotImplementedError

    # -- definitions --

    def put_exchange(self, exchange: ExchangeDef) -> None:
        self._recorder.add(PutDef("x", (exchange.vhost, exchange.name),
                                  self._definition(exchange)))

    def delete_exchange(self, vhost: str, name: str) -> None:
        self._recorder.add(DeleteExchange(vhost, name))

    def put_queue(self, queue: QueueDef) -> int:
        key = (queue.vhost, queue.name)
        qid = self._qids.get(key, self._recorder.next_qid)
        payload = self._definition(replace(queue, qid=qid))  # may raise: allocate after
        if qid == self._recorder.next_qid:
            self._qids[key] = qid
            self._recorder.next_qid += 1
        self._recorder.add(PutDef("q", key, payload))
        return qid

    def delete_queue(self, vhost: str, name: str, qid: int) -> None:
        if self._qids.get((vhost, name)) == qid:
            del self._qids[vhost, name]
        self._recorder.delete_queue(vhost, name, qid)

    def put_binding(self, binding: BindingDef) -> None:
        self._recorder.add(PutDef("b", binding_identity(binding), self._definition(binding)))

    def delete_binding(self, binding: BindingDef) -> None:
        self._recorder.add(DeleteDef("b", binding_identity(binding)))

    def put_policy(self, policy: PolicyDef) -> None:
        self._recorder.add(PutDef("p", (policy.vhost, policy.name), self._definition(policy)))

    def delete_policy(self, vhost: str, name: str) -> None:
        self._recorder.add(DeleteDef("p", (vhost, name)))

    def put_access(self, access: AccessDef) -> None:
        self._recorder.add(PutDef("a", (access.kind, *access.key), self._definition(access)))

    def delete_access(self, kind: str, key: tuple[str, ...]) -> None:
        self._recorder.add(DeleteDef("a", (kind, *key)))

    # -- queue entries --

    def enqueue(self, qid: int, seq: int, message: Message, transient: bool = False,
                expires_at: int = 0) -> None:
        self._recorder.enqueue(qid, seq, message, transient, expires_at)

    def mark_delivered(self, qid: int, seq: int, message: Message, delivery_count: int) -> None:
        self._recorder.mark_delivered(qid, seq, delivery_count)

    def remove(self, qid: int, seq: int, message: Message) -> None:
        self._recorder.remove(qid, seq)

    def purge(self, qid: int, from_seq: int = 0) -> None:
        self._recorder.purge(qid, from_seq)

    def has_pending(self) -> bool:
        return self._recorder.has_pending()

    def take_batch(self) -> Batch:
        return self._recorder.take()
