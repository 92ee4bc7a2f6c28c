"""Reading a queue's entries back from LMDB in key order: the paged tail's read-back.

Theory of operation
-------------------
A paged-out FIFO tail is read back in runs of a couple of thousand entries as the
queue's head drains (``queues/ready.py``). Each entry is an ``index`` record
(qid, seq) -> (message id, ...) and a ``messages`` record. A run is read a column at a
time, so that the work per entry is done by C loops (py-lmdb's, ``struct``'s, ``map``)
and what is left in Python is one short loop building the messages:

* the index: one cursor walk collects the run's keys and values (as ``bytes``: py-lmdb
  builds a ``bytes`` faster than a buffer object, ``buffers=False``), and one
  ``struct`` call unpacks all the keys, one more all the values when they have the same
  layout (format 3, sized, all without an expiry or all with one: a stream's entries
  carry their chunk's time there; otherwise each is decoded alone);
* the messages: those of one queue's backlog were published one after another, so their
  ids are consecutive and sit side by side in the ``messages`` database (new records are
  appended after the last page, ``lmdb_writer._put_new_records``). When the run's ids
  are consecutive, one cursor walk of as many records from the first reads them all, and
  landing on the last id proves no record was missing. Otherwise (messages shared with
  other queues, interleaved with theirs, requeued out of order) ``getmulti`` looks each
  up; a dangling index entry is found by the count that comes back short;
* the records: consecutive messages of a backlog usually share their exchange, routing
  key and properties, so a record that starts with the previous record's head reuses its
  decoded ``str`` and ``bytes`` objects (less to build, and less memory once in the
  queue) and only its body is copied out.

That took a 1 KB backlog's read-back from 30.0k to 13.2k instructions an entry under
callgrind, 3.7 to 2.2 us of CPU on a loaded machine (``docs/benchmarks.md``, "Backlogs
paged by default"). What is left is mostly CPython's and py-lmdb's own per-object work:
allocating the two copies of each record (as read, and its body), py-lmdb releasing and
taking the GIL at each cursor step, and the collector walking the new objects. Sharing one
``map`` over the records instead of the Python loop that builds the messages measured the
same (13.35k), so the loop stays. The module is compiled (``node/compiled.py``): a stream's
reader reads its pages through here too, and a 1 KB stream entry's read went from 15.0k to
10.3k instructions with the compiled loop and the stamped layout above.

The pages a run maps are charged to the store's page budget (``mapped_memory.PageBudget``)
before they are read, in chunks of at most a release's worth: key-order neighbours spend
their share of a page each (``nearby``, from the body sizes the index keeps), records found
by lookup a page each, so the budget still bounds what one call maps.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from functools import lru_cache
from itertools import islice, repeat
from math import ceil
from typing import Literal, Protocol, overload

from leveret.model.message import Message
from leveret.persistence.mapped_memory import ENTRY_SIZE, PAGE_SIZE, PageBudget
from leveret.persistence.records import (
    FLAG_EXPIRES,
    FLAG_SIZED,
    FLAG_TRANSIENT,
    INDEX_KEY,
    INDEX_SIZED,
    MESSAGE_HEAD,
    U64,
    decode_index_value,
)
from leveret.persistence.store import StoredEntry

_pack_id = U64.pack
_unpack_head = MESSAGE_HEAD.unpack_from
_HEAD = MESSAGE_HEAD.size
_SIZED = INDEX_SIZED.size
_STAMPED = _SIZED + U64.size  # sized, then its expires_at (a TTL, or a stream's chunk time)
_new_entry = tuple.__new__
# The flags an entry of the uniform layout may carry (FLAG_EXPIRES would add a field).
_PLAIN_FLAGS = FLAG_SIZED | FLAG_TRANSIENT
_STAMPED_FLAGS = _PLAIN_FLAGS | FLAG_EXPIRES


class Cursor(Protocol):
    """What the walk uses of an LMDB cursor (``lmdb.Cursor``, in a ``buffers=False``
    transaction: keys and values are ``bytes``)."""

    def set_range(self, key: bytes) -> bool: ...
    def set_key(self, key: bytes) -> bool: ...
    def key(self) -> bytes: ...
    @overload
    def iternext(self) -> Iterator[tuple[bytes, bytes]]: ...
    @overload
    def iternext(self, keys: Literal[False], values: Literal[True]) -> Iterator[bytes]: ...
    def getmulti(self, keys: Sequence[bytes]) -> list[tuple[bytes, bytes]]: ...


class ReadTransaction(Protocol):
    """An LMDB read transaction (``lmdb.Transaction``); a database is an opaque handle."""

    def cursor(self, db: object) -> Cursor: ...


class MissingMessage(Exception):
    """An index entry refers to a message the store does not hold (a corrupt store)."""

    def __init__(self, seq: int, msg_id: int) -> None:
        super().__init__(seq, msg_id)
        self.seq = seq
        self.msg_id = msg_id


@lru_cache(maxsize=64)
def _layout(fields: str, count: int) -> struct.Struct:
    """``count`` records of ``fields`` back to back (a run's keys, or its values)."""
    return struct.Struct(">" + fields * count)


def read_run(txn: ReadTransaction, index_db: object, messages_db: object, qid: int,
             from_seq: int, limit: int, below: int, pages: PageBudget) -> list[StoredEntry]:
    """Up to ``limit`` entries of queue ``qid`` from ``from_seq`` on, in key order, read in
    ``txn`` (opened with ``buffers=False``); an entry below ``below`` was delivered at least
    once (``batch.DeliveredBelow``). Raises ``MissingMessage`` for a dangling index entry."""
    index = txn.cursor(db=index_db)
    if limit <= 0 or not index.set_range(INDEX_KEY.pack(qid, from_seq)):
        return []
    run = list(islice(index.iternext(), limit))
    keys = _layout("IQ", len(run)).unpack(b"".join([key for key, _ in run]))
    count = keys[::2].count(qid)  # keys ascend: the queue's come first, then the next's
    if not count:
        return []
    seqs = keys[1:2 * count:2]
    msg_ids, deliveries, expires, size = _index_values([value for _, value in run[:count]])
    if below > seqs[0]:
        deliveries = [d or int(s < below) for s, d in zip(seqs, deliveries, strict=True)]
    # Consecutive ids are read by one walk, an entry spending its share of a page
    # (``nearby``, from the body sizes in the index); others by lookup, a page each.
    first, last = msg_ids[0], msg_ids[-1]
    walk = (size is not None and last - first == count - 1
            and list(msg_ids) == list(range(first, last + 1)))
    share = (size / count + ENTRY_SIZE) / PAGE_SIZE if size is not None and walk else 1.0
    step = max(1, ceil(pages.every / share))  # entries to a release's worth of pages
    messages = txn.cursor(db=messages_db)
    records: list[bytes] = []
    for at in range(0, count, step):
        records += _records(messages, seqs[at:at + step], msg_ids[at:at + step],
                            share if walk else 0.0, pages)
    return list(map(_new_entry, repeat(StoredEntry),
                    zip(seqs, deliveries, _messages(records, msg_ids), expires, strict=True)))


def _index_values(values: list[bytes]
                  ) -> tuple[Sequence[int], Sequence[int], Sequence[int], int | None]:
    """The run's (message ids, delivery counts, expiries) from its index values, and its
    body bytes (None: an entry of a store before format 3 does not say)."""
    count = len(values)
    shortest, total = min(map(len, values)), sum(map(len, values))
    if shortest == _SIZED and total == _SIZED * count:
        fields: tuple[int, ...] = _layout("QIBI", count).unpack(b"".join(values))
        if not any(flags & ~_PLAIN_FLAGS for flags in set(fields[2::4])):
            return fields[::4], fields[1::4], [0] * count, sum(fields[3::4])
    elif shortest == _STAMPED and total == _STAMPED * count:  # each with its expires_at
        fields = _layout("QIBIQ", count).unpack(b"".join(values))
        if all(flags & ~_STAMPED_FLAGS == 0 and flags & FLAG_EXPIRES and flags & FLAG_SIZED
               for flags in set(fields[2::5])):
            return fields[::5], fields[1::5], fields[4::5], sum(fields[3::5])
    decoded = [decode_index_value(value) for value in values]
    sizes = [d[4] for d in decoded]
    size = None if None in sizes else sum(s or 0 for s in sizes)
    return [d[0] for d in decoded], [d[1] for d in decoded], [d[3] for d in decoded], size


def _records(messages: Cursor, seqs: Sequence[int], msg_ids: Sequence[int], share: float,
             pages: PageBudget) -> list[bytes]:
    """The message records of ``msg_ids``, in that order: consecutive ids (``share``: the
    page each spends) by one walk, others (``share`` 0) by lookup (see the module
    docstring). Their pages are charged before they are mapped."""
    count = len(msg_ids)
    if share:
        last = _pack_id(msg_ids[-1])
        pages.spend(share * count)
        if messages.set_key(_pack_id(msg_ids[0])):
            records = list(islice(messages.iternext(keys=False, values=True), count))
            if len(records) == count and messages.key() == last:
                return records
    pages.spend(count)
    found = messages.getmulti([_pack_id(msg_id) for msg_id in msg_ids])
    if len(found) != count:
        present = {U64.unpack(key)[0] for key, _ in found}
        at = next(i for i, msg_id in enumerate(msg_ids) if msg_id not in present)
        raise MissingMessage(seqs[at], msg_ids[at])
    return [record for _, record in found]


def _messages(records: list[bytes], msg_ids: Sequence[int]) -> list[Message]:
    """Decode ``records`` (``records.decode_message``), sharing the exchange, routing key
    and properties of consecutive records that have the same head."""
    out: list[Message] = []
    append = out.append
    head = b"\xff"  # no record starts with it (an exchange name is short): the first is decoded
    exchange = routing_key = ""
    props = b""
    at = 0
    for record, msg_id in zip(records, msg_ids, strict=True):
        if not record.startswith(head):
            exchange_len, routing_key_len, props_len = _unpack_head(record, 0)
            at = _HEAD + exchange_len
            exchange = str(record[_HEAD:at], "utf-8", "surrogateescape")
            routing_key = str(record[at:at + routing_key_len], "utf-8", "surrogateescape")
            at += routing_key_len
            props = record[at:at + props_len]
            at += props_len
            head = record[:at]
        message = Message(exchange, routing_key, props, record[at:])
        message.store_id = msg_id
        append(message)
    return out
