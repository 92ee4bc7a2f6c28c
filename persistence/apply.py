"""The one op dispatcher: how a ``batch.Batch`` changes a store.

Theory of operation
-------------------
Every store applies batches here, so what an operation means (a cancelled
enqueue is skipped, deleting a queue drops its entries (``drop_queue``: at once,
or in later slices), its definition if it still has that qid and the bindings to
it, ...) is written once. A
store only provides the primitives of ``Applier`` on whatever it keeps (a
transaction for LMDB, dicts for the memory store). This is also the function
a follower replica will call with a batch received from its leader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from leveret.persistence.batch import (
    Batch,
    DedupeAppend,
    DeleteDefinition,
    DeleteExchange,
    DeleteQueue,
    DeliveredBelow,
    DropDedupe,
    Enqueue,
    MarkDelivered,
    Purge,
    PutDefinition,
    Remove,
    Truncate,
)
from leveret.persistence.records import Definition, binding_identity, definition_identity
from leveret.persistence.store import BindingDef


class Applier(Protocol):
    """A store's primitives, used inside one write (transaction) by ``apply_batch``."""

    def put_entry(self, op: Enqueue) -> None:
        """Add or replace entry (op.qid, op.seq); store the message on its first entry."""

    def remove_entry(self, qid: int, seq: int) -> None:
        """Drop the entry if present; the message goes with its last entry."""

    def set_delivery_count(self, qid: int, seq: int, delivery_count: int) -> None:
        """Update the entry if present."""

    def set_delivered_below(self, qid: int, below: int) -> None:
        """Raise the queue's delivered mark to ``below`` (``batch.DeliveredBelow``)."""

    def remove_entries(self, qid: int, from_seq: int) -> None:
        """Drop the queue's entries with seq >= from_seq."""

    def remove_entries_below(self, qid: int, below: int) -> None:
        """Drop the queue's entries with seq < below."""

    def drop_queue(self, qid: int) -> None:
        """The queue is gone: drop its counters and its entries, at once or in slices
        (``lmdb_drops``) that write them off in later transactions; either way no read
        sees them again (nothing refers to the qid any more) and qids never repeat."""

    def get_definition(self, kind: str, identity: tuple[str, ...]) -> Definition | None: ...

    def put_definition(self, kind: str, identity: tuple[str, ...],
                       definition: Definition) -> None: ...

    def delete_definition(self, kind: str, identity: tuple[str, ...]) -> None: ...

    def bindings(self) -> Iterable[BindingDef]: ...

    def append_dedupe(self, op: DedupeAppend) -> None:
        """Add the op's keys to its window, and drop the window's keys placed below its floor."""

    def drop_dedupe(self, scope: bytes) -> None:
        """Drop every key of the window."""


def apply_batch(batch: Batch, store: Applier) -> None:
    """Apply every operation of ``batch``, in order (the caller commits).

    Enqueues and removes are nearly every operation of a busy batch (a relayed message
    is one of each), so they skip the table and its extra call."""
    put_entry, remove_entry, table = store.put_entry, store.remove_entry, _APPLY
    for op in batch.ops:
        if type(op) is Enqueue:
            if not op.cancelled:
                put_entry(op)
        elif type(op) is Remove:
            remove_entry(op.qid, op.seq)
        else:
            table[type(op)](store, op)


def _enqueue(store: Applier, op: Enqueue) -> None:
    if not op.cancelled:
        store.put_entry(op)


def _mark_delivered(store: Applier, op: MarkDelivered) -> None:
    if not op.cancelled:
        store.set_delivery_count(op.qid, op.seq, op.delivery_count)


def _delivered_below(store: Applier, op: DeliveredBelow) -> None:
    if not op.cancelled:
        store.set_delivered_below(op.qid, op.below)


def _remove(store: Applier, op: Remove) -> None:
    store.remove_entry(op.qid, op.seq)


def _purge(store: Applier, op: Purge) -> None:
    store.remove_entries(op.qid, op.from_seq)


def _truncate(store: Applier, op: Truncate) -> None:
    store.remove_entries_below(op.qid, op.below)


def _delete_queue(store: Applier, op: DeleteQueue) -> None:
    store.drop_queue(op.qid)
    identity = (op.vhost, op.name)
    stored = store.get_definition("q", identity)
    if stored is not None and getattr(stored, "qid", None) == op.qid:  # not a newer namesake
        store.delete_definition("q", identity)
    _drop_bindings(store, lambda b: b.vhost == op.vhost and b.destination_type == "queue"
                   and b.destination == op.name)


def _delete_exchange(store: Applier, op: DeleteExchange) -> None:
    store.delete_definition("x", (op.vhost, op.name))
    _drop_bindings(store, lambda b: b.vhost == op.vhost and (b.source == op.name or (
        b.destination_type == "exchange" and b.destination == op.name)))


def _drop_bindings(store: Applier, matches: Callable[[BindingDef], bool]) -> None:
    for binding in [b for b in store.bindings() if matches(b)]:
        store.delete_definition("b", binding_identity(binding))


def _put_definition(store: Applier, op: PutDefinition) -> None:
    kind, identity = definition_identity(op.definition)
    store.put_definition(kind, identity, op.definition)


def _delete_definition(store: Applier, op: DeleteDefinition) -> None:
    store.delete_definition(op.kind, op.identity)


def _append_dedupe(store: Applier, op: DedupeAppend) -> None:
    store.append_dedupe(op)


def _drop_dedupe(store: Applier, op: DropDedupe) -> None:
    store.drop_dedupe(op.scope)


_APPLY: dict[type, Callable[[Applier, Any], None]] = {
    Enqueue: _enqueue,
    MarkDelivered: _mark_delivered,
    DeliveredBelow: _delivered_below,
    Remove: _remove,
    Purge: _purge,
    Truncate: _truncate,
    DeleteQueue: _delete_queue,
    DeleteExchange: _delete_exchange,
    PutDefinition: _put_definition,
    DeleteDefinition: _delete_definition,
    DedupeAppend: _append_dedupe,
    DropDedupe: _drop_dedupe,
}
