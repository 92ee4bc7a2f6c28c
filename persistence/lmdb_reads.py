"""Reading a queue's entries back from LMDB in key order: the paged tail's read-back.

Theory of operation
-------------------
A paged-out FIFO tail is read back in runs of a couple of thousand entries as the
queue's head drains (``queues/ready.py``). Each entry is an ``index`` record
(qid, seq) -> (message id, ...) and a ``messages`` record. One read transaction walks
the index with a cursor; the messages are walked with a second cursor. Messages of one
queue's backlog were published one after another, so their ids are consecutive and sit
side by side in the ``messages`` database (new records are appended after the last
page, ``lmdb_writer._put_new_records``): the next one is the message cursor's next
record, one step along a leaf instead of a descent from the root per entry (``get``).
An id that is not the next one (a message shared with another queue, one requeued out
of order) falls back to a positioned lookup. That saves about a tenth of the read-back
against a ``get`` per entry (4.6 against 5.1 us of CPU an entry, ``docs/benchmarks.md``,
"Backlogs paged by default"): the rest is building the entries' Python objects, which
neither compiling this loop with Cython nor moving it to a thread (it holds the GIL for
nearly all of it) took off the event loop.

Records are read as buffers into the map and copied once, into the message's own
``bytes`` (``records.decode_message``). The pages the walk maps are charged to the
store's page budget (``mapped_memory.PageBudget``) as they are read: a key-order
neighbour lies on the page before's or the next and spends its share of a page, a record
found by a lookup a page of its own, so the budget still bounds what one run maps.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from leveret.persistence.mapped_memory import PageBudget, nearby
from leveret.persistence.records import INDEX_KEY, U64, decode_index_value, decode_message
from leveret.persistence.store import StoredEntry

_unpack_key = INDEX_KEY.unpack
_pack_id = U64.pack


class Cursor(Protocol):
    """What the walk uses of an LMDB cursor (``lmdb.Cursor``; buffers are memoryviews)."""

    def set_range(self, key: bytes) -> bool: ...
    def set_key(self, key: bytes) -> bool: ...
    def next(self) -> bool: ...
    def key(self) -> bytes | memoryview: ...
    def value(self) -> bytes | memoryview: ...
    def iternext(self) -> Iterator[tuple[bytes | memoryview, bytes | memoryview]]: ...


class ReadTransaction(Protocol):
    """An LMDB read transaction (``lmdb.Transaction``); a database is an opaque handle."""

    def cursor(self, db: object) -> Cursor: ...


class MissingMessage(Exception):
    """An index entry refers to a message the store does not hold (a corrupt store)."""

    def __init__(self, seq: int, msg_id: int) -> None:
        super().__init__(seq, msg_id)
        self.seq = seq
        self.msg_id = msg_id


def read_run(txn: ReadTransaction, index_db: object, messages_db: object, qid: int,
             from_seq: int, limit: int, below: int, pages: PageBudget) -> list[StoredEntry]:
    """Up to ``limit`` entries of queue ``qid`` from ``from_seq`` on, in key order, read in
    ``txn`` (opened with ``buffers=True``); an entry below ``below`` was delivered at least
    once (``batch.DeliveredBelow``). Raises ``MissingMessage`` for a dangling index entry."""
    out: list[StoredEntry] = []
    index = txn.cursor(db=index_db)
    if limit <= 0 or not index.set_range(INDEX_KEY.pack(qid, from_seq)):
        return out
    messages = txn.cursor(db=messages_db)
    append = out.append
    expect = -1  # the message id the messages cursor's next record would have
    spend = pages.spend
    for key, value in index.iternext():
        key_qid, seq = _unpack_key(key)
        if key_qid != qid:
            break
        msg_id, deliveries, _, expires_at, _ = decode_index_value(value)
        if seq < below and not deliveries:
            deliveries = 1
        if msg_id == expect and messages.next() and messages.key() == _pack_id(msg_id):
            message = decode_message(messages.value(), msg_id)
            spend(nearby(len(message.body) + len(message.raw_properties)))
        elif messages.set_key(_pack_id(msg_id)):
            message = decode_message(messages.value(), msg_id)
            spend()  # anywhere in the file: a page of its own
        else:
            raise MissingMessage(seq, msg_id)
        expect = msg_id + 1
        append(StoredEntry(seq, deliveries, message, expires_at))
        if len(out) >= limit:
            break
    return out
