"""A deleted queue's stored entries, written off in slices after the delete commits.

Theory of operation
-------------------
LMDB has one writer. Removing a deep queue's entries in the transaction that deletes it
was bounded in memory (``LmdbWriter._forget_in_bulk``) but not in time, and every other
queue's commit, so every publisher confirm on the node, waited behind it: a
10M-message ``queue.delete`` held the node's confirms for as long as it took.

So the deleting transaction drops only the queue's definition, bindings and counter, and
leaves a *drop marker* (``meta``: ``b"d" + u32 qid``, ``mark``). Its entries and the
message records they alone hold are removed afterwards, at most ``slice`` entries per
transaction (``remove_slice``): folded into the next batch's transaction while batches
come, in one of their own (``LmdbStore.reclaim``, driven by group commit) while none
does. Other commits interleave with the slices; each waits for one slice at most.

Why leftovers are harmless meanwhile: nothing refers to the qid any more, and qids never
repeat (``batch.Recorder.put_queue``), so no read finds them, and a same-named queue
declared at once has a new qid and starts empty. Messages also held by other queues keep
their records (reference counts, as for any removal). A crash part-way leaves the marker
and the entries not yet removed; the reopened store goes on from there
(``LmdbStore.__init__`` finds the markers). The marker goes in the slice that removes the
queue's last entry.

In RabbitMQ each classic queue is a process with its own index, so deleting one does not
hold up the others' writes; Leveret's one store needs the slices for the same effect.
What a client sees is unchanged: ``queue.delete-ok`` with the ready count, 404 after.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import lmdb

from leveret.persistence.records import U32

if TYPE_CHECKING:
    from leveret.persistence.lmdb_writer import LmdbWriter

MARKER_PREFIX = b"d"  # no other ``meta`` key starts with it (lmdb_writer's META_* and counters)
_MARKER_SIZE = len(MARKER_PREFIX) + U32.size
# Entries one slice removes: about 10 ms of the writer's time, as much as the fsync that
# ends it (a removal costs ~5 us: index entry, message record, reference count; measured
# on a 200,000-message queue), so a deletion takes about twice as long as in one
# transaction and a confirm waits at most a slice longer meanwhile. ``queue_delete_slice``.
SLICE = 2048


def mark(txn: lmdb.Transaction, meta: lmdb._Database, qid: int) -> None:
    """Leave the drop marker of ``qid`` (in the transaction that deletes the queue)."""
    txn.put(MARKER_PREFIX + U32.pack(qid), b"", db=meta)


def pending(txn: lmdb.Transaction, meta: lmdb._Database) -> list[int]:
    """The qids whose entries are still to remove, oldest marker key first."""
    cursor = txn.cursor(db=meta)
    qids: list[int] = []
    if cursor.set_range(MARKER_PREFIX):
        for key in cursor.iternext(keys=True, values=False):
            if key[:1] != MARKER_PREFIX:
                break
            if len(key) == _MARKER_SIZE:
                qids.append(U32.unpack_from(key, 1)[0])
    return qids


class Slices:
    """The store's deleted queues still to write off: whether any are (``pending``, true
    until a slice finds no marker, so a reopened store looks once), and one slice at a
    time (``remove``), logged when a queue's last one is in."""

    def __init__(self, size: int, log: logging.Logger, where: object) -> None:
        self.size = size  # entries per slice (``queue_delete_slice``)
        self.pending = True
        self._log, self._where = log, where
        self._removed: dict[int, int] = {}  # entries removed so far, by qid (for the log)

    def remove(self, writer: LmdbWriter) -> bool:
        """Remove one slice in ``writer``'s transaction and finish it (the caller commits);
        returns whether markers are left after this transaction."""
        qid, removed, more = remove_slice(writer, self.size)
        writer.finish()
        if qid:
            total = self._removed[qid] = self._removed.get(qid, 0) + removed
            if removed < self.size:  # its last slice
                del self._removed[qid]
                self._log.log(logging.INFO if total >= self.size else logging.DEBUG,
                              "store %s: deleted queue %d written off (%d entries)",
                              self._where, qid, total)
        return more


def remove_slice(writer: LmdbWriter, limit: int) -> tuple[int, int, bool]:
    """Remove up to ``limit`` entries of the first marked queue in ``writer``'s transaction
    (the caller finishes and commits it); returns (qid or 0, entries removed, whether any
    marker is left after this transaction)."""
    qids = pending(writer.txn, writer.meta)
    if not qids:
        return 0, 0, False
    qid = qids[0]
    removed = writer.remove_from(qid, 0, limit)
    writer.counters[qid] = None  # finish writes no counter back for it
    if removed < limit:  # the queue's last entries: the marker goes with them
        writer.txn.delete(MARKER_PREFIX + U32.pack(qid), db=writer.meta)
        return qid, removed, len(qids) > 1
    return qid, removed, True
