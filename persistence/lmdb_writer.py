"""Applying one batch inside one LMDB write transaction (``lmdb_store.py`` opens it).

``LmdbWriter`` is the ``apply.Applier`` the store hands to ``apply_batch``:
the primitives a batch's operations reduce to (put/remove an index entry,
reference counts, definitions), with the byte layouts of ``records.py``.

Each queue's counter keeps its entries' body bytes, and those of its
transient entries, so that a restarted queue knows the bytes of its paged-out
tail and the management plane its persistent bytes without reading messages.
The size travels in the index value: a removal learns it from the value it
deletes anyway, so keeping the totals costs a few integer operations per
entry, no extra read.
"""

from __future__ import annotations

from typing import Any

import lmdb

from leveret.persistence import (
    lmdb_drops,
    records,  # encode_message: a C call when compiled (.pxd)
)
from leveret.persistence.batch import CLUSTER_SHIFT, SEQ_MASK, DedupeAppend, Enqueue
from leveret.persistence.mapped_memory import ENTRY_SIZE, PAGE_SIZE, PageBudget, nearby
from leveret.persistence.records import (
    COUNTER,
    FLAG_SIZED,
    FLAG_TRANSIENT,
    INDEX_KEY,
    INDEX_SIZED,
    U32,
    U64,
    UNKNOWN,
    Definition,
    decode_counter,
    decode_definition,
    decode_index_value,
    definition_key,
    encode_dedupe_runs,
    encode_definition,
    encode_index_value,
)
from leveret.persistence.store import BindingDef

# Keys of the ``meta`` database (``lmdb_store.py`` describes what each holds).
META_FORMAT = b"format"
META_VERSION = b"version"
META_NEXT_MSG = b"next_msg_id"
META_NEXT_QID = b"next_qid"
META_LAST_SEQ = b"last_batch_seq"
COUNTER_PREFIX = b"c"


_ID_MASK = (1 << CLUSTER_SHIFT) - 1  # a message id's counter, under its cluster byte
# The per-message lines' packers, bound once: each use is then a call, without the lookup
# of the method on its ``Struct`` first.
_pack_index_key = INDEX_KEY.pack
_pack_index_sized = INDEX_SIZED.pack
_unpack_index_sized = INDEX_SIZED.unpack
_pack_id = U64.pack
_INDEX_SIZED_SIZE = INDEX_SIZED.size


def _put_new_records(cursor: Any, keys: list[bytes], records: list[bytes]) -> None:
    """Write records under keys not in the database, appending when they come after it.

    Ids are handed out in order, so a batch's new records usually all sort after every
    record on disk. LMDB then fills the last page and starts a new one (``MDB_APPEND``)
    instead of searching for each key and splitting a full page in half: with 1-2 KB
    messages, pages hold twice as many records or more and each is written once
    (the bench journal, ``git show f42cb0b:bench/README.md``, "Spark bridge, eleventh
    round"). A priority queue's records (a
    higher cluster byte, ``batch.CLUSTER_SHIFT``) sort after the plain ones, so then,
    or when the batch mixes clusters, the keys go where they belong, as before.
    """
    if cursor.last() and cursor.key() >= keys[0]:
        cursor.putmulti(zip(keys, records))
        return
    consumed, added = cursor.putmulti(zip(keys, records), append=True)
    if added != consumed:  # out of order (LMDB skipped those): put them all where they go
        cursor.putmulti(zip(keys, records))  # the appended ones are rewritten unchanged


def _no_budget(n: float = 1) -> None:
    pass


_NEAR_ENTRY = ENTRY_SIZE / PAGE_SIZE  # the budget an index entry next to the last one spends


class LmdbWriter:
    """The ``apply.Applier`` primitives inside one write transaction.

    Reference counts and queue counters are cached for the transaction and
    written once in ``finish`` (a message routed to many queues in one batch
    costs one refs write, not one per queue). A message with one entry, the
    usual case, has no refs record at all (format 4: absent means one), so
    storing and removing it touches only its record and its index entry. Entries under
    keys the queue never had (seq at or above its counter's next seq: publishes) are
    written in bulk, one ``putmulti`` per database, before the next operation that reads
    or deletes (``_write_fresh``); removals go through one cursor for the transaction.
    """

    def __init__(self, txn: Any, dbs: dict[bytes, Any], pages: PageBudget | None = None) -> None:
        self.txn = txn
        # Each entry written or removed spends from the store's page budget (lmdb_store.py).
        self.spend = pages.spend if pages is not None else _no_budget
        self.meta, self.defs = dbs[b"meta"], dbs[b"defs"]
        self.messages, self.refs_db = dbs[b"messages"], dbs[b"refs"]
        self.index, self.transient = dbs[b"index"], dbs[b"transient"]
        self.dedupe = dbs[b"dedupe"]
        self.refs: dict[int, int] = {}
        self.counted: set[int] = set()  # message ids whose refs record is on disk
        self._first_new = -1  # ids (counter part) from here on were never committed
        self.counters: dict[int, list[int] | None] = {}  # None: delete (queue deleted)
        # put_entry's deferred writes: keys and values side by side (bytes only, so nothing
        # here is a container the cyclic collector would walk), zipped into putmulti.
        self._fresh_message_keys: list[bytes] = []
        self._fresh_messages: list[bytes] = []
        self._fresh_index_keys: list[bytes] = []
        self._fresh_index: list[bytes] = []
        self._index_cursor: Any = None  # _index()
        self._last_qid = -1  # the (qid, seq) remove_entry took last: the next is nearby
        self._last_seq = -2
        self._near_spent = 0.0  # remove_entry's nearby shares, spent a page at a time
        # Whether the refs database holds any record: usually not (one entry per message,
        # format 4), and then a removal knows its message's count without a lookup.
        self._refs_on_disk: bool | None = None
        self._messages_cursor: lmdb.Cursor | None = None  # _forget_in_bulk's, on the message records
        self._last_dropped = -2  # the message id _forget_in_bulk dropped last
        self.dropped = False  # drop_queue left a marker: the store has slices to remove

    def refcount(self, msg_id: int, has_entry: bool) -> int:
        """Entries referring to ``msg_id``; ``has_entry``: the caller holds one of them."""
        refs = self.refs.get(msg_id)
        if refs is not None:
            return refs
        if not has_entry and msg_id & _ID_MASK >= self.first_new_id():
            refs = 0  # handed out after the last commit: not on disk, no read needed
        elif has_entry and not self.refs_on_disk():
            refs = 1  # absent means one, and no message has a refs record
        else:
            raw = self.txn.get(U64.pack(msg_id), db=self.refs_db)
            if raw is not None:
                self.counted.add(msg_id)
                refs = U32.unpack(raw)[0]
            elif has_entry:
                refs = 1
            else:  # an older message gaining an entry: one if its record is there
                refs = int(self.txn.get(U64.pack(msg_id), db=self.messages) is not None)
        self.refs[msg_id] = refs
        return refs

    def refs_on_disk(self) -> bool:
        """Whether any message has a refs record (read once per batch: ``finish`` writes
        them, after every operation)."""
        on_disk = self._refs_on_disk
        if on_disk is None:
            on_disk = self._refs_on_disk = self.txn.stat(self.refs_db)["entries"] > 0
        return on_disk

    def first_new_id(self) -> int:
        """The committed ``next_msg_id``: ids are handed out in order and each commit
        persists the highest issued, so no id from here on has a record on disk."""
        if self._first_new < 0:
            raw = self.txn.get(META_NEXT_MSG, db=self.meta)
            self._first_new = U64.unpack(raw)[0] if raw is not None else 0
        return self._first_new

    def counter(self, qid: int) -> list[int]:
        """[entries, next seq, body bytes, transient entries, their body bytes, delivered
        below] (``records.decode_counter``), cached for the transaction."""
        if qid in self.counters:
            counter = self.counters[qid]
            if counter is None:  # deleted earlier in this transaction: starts afresh
                counter = self.counters[qid] = [0, 0, 0, 0, 0, 0]
            return counter
        raw = self.txn.get(COUNTER_PREFIX + U32.pack(qid), db=self.meta)
        counter = self.counters[qid] = decode_counter(raw) if raw else [0, 0, 0, 0, 0, 0]
        return counter

    def put_entry(self, op: Enqueue) -> None:
        message = op.message
        msg_id = message.store_id
        refs = self.refs.get(msg_id)
        if refs is None:
            # Handed out after the last commit: no record on disk (refcount's first case).
            first_new = self._first_new
            refs = 0 if 0 <= first_new <= msg_id & _ID_MASK else self.refcount(msg_id, False)
        qid, seq = op.qid, op.seq
        key = _pack_index_key(qid, seq)
        size = len(message.body)
        transient = op.transient
        if transient or op.expires_at:
            value = encode_index_value(
                msg_id, op.delivery_count, FLAG_TRANSIENT if transient else 0, op.expires_at, size)
        else:  # the usual entry: encode_index_value's last case, without the call
            value = _pack_index_sized(msg_id, op.delivery_count, FLAG_SIZED, size)
        counter = self.counters.get(qid) or self.counter(qid)
        seq &= SEQ_MASK
        if seq >= counter[1]:
            # Above every seq the queue has on disk, so the key is new: the record and the
            # entry wait in ``_fresh_*`` and go in with one C call each (``_write_fresh``).
            if refs == 0:
                self._fresh_message_keys.append(_pack_id(msg_id))
                self._fresh_messages.append(records.encode_message(message))
            self._fresh_index_keys.append(key)
            self._fresh_index.append(value)
            counter[1] = seq + 1
        else:
            self._write_fresh()
            self.spend()
            if refs == 0:  # first entry on disk: write the record (once for all queues)
                self.txn.put(U64.pack(msg_id), records.encode_message(message), db=self.messages)
            old = self.txn.replace(key, value, db=self.index)
            if old is not None:  # (qid, seq) reused: the old entry is replaced
                self._forget_entry(key, old, counter)
        self.refs[msg_id] = refs + 1
        counter[0] += 1
        if counter[2] != UNKNOWN:
            counter[2] += size
        if transient:
            counter[3] += 1
            counter[4] += size
            self.txn.put(key, b"", db=self.transient)

    def _write_fresh(self) -> None:
        """Write the deferred records and entries of new keys (before anything reads or
        deletes, and at the end); they spend from the page budget together."""
        if self._fresh_index:
            txn = self.txn
            if self._fresh_messages:
                _put_new_records(txn.cursor(db=self.messages), self._fresh_message_keys,
                                 self._fresh_messages)
                self._fresh_message_keys, self._fresh_messages = [], []
            txn.cursor(db=self.index).putmulti(zip(self._fresh_index_keys, self._fresh_index))
            self.spend(len(self._fresh_index))
            self._fresh_index_keys, self._fresh_index = [], []

    def _index(self) -> Any:
        """The transaction's one cursor on the index: acks remove neighbouring keys, and
        LMDB finds a key on the cursor's page without descending from the root."""
        if self._index_cursor is None:
            self._index_cursor = self.txn.cursor(db=self.index)
        return self._index_cursor

    def remove_entry(self, qid: int, seq: int) -> None:
        if self._fresh_index:
            self._write_fresh()
        if qid == self._last_qid and seq == self._last_seq + 1:
            # An ack of the entry after the last one removed: the cursor's page
            # (mapped_memory); these shares are spent a whole page at a time.
            near = self._near_spent + _NEAR_ENTRY
            if near >= 1:
                self.spend(near)
                near = 0.0
            self._near_spent = near
        else:
            self._last_qid = qid
            self.spend()
        self._last_seq = seq
        key = _pack_index_key(qid, seq)
        cursor = self._index_cursor
        if cursor is None:
            cursor = self._index()
        value = cursor.pop(key)
        if value is None:  # absent: its enqueue was in a batch that failed
            return
        if len(value) == _INDEX_SIZED_SIZE and value[12] == FLAG_SIZED:
            # The usual entry (_forget_entry's commonest case, without its calls).
            msg_id, _, _, size = _unpack_index_sized(value)
            refs = self.refs.get(msg_id)
            if refs is None:
                refs = self.refcount(msg_id, True)
            self.refs[msg_id] = refs - 1
            counter = self.counters.get(qid) or self.counter(qid)
            entries = counter[0] = counter[0] - 1
            if not entries:
                counter[2] = counter[3] = counter[4] = 0
            elif counter[2] != UNKNOWN:
                counter[2] -= size
        else:
            self._forget_entry(key, value, self.counter(qid))

    def set_delivery_count(self, qid: int, seq: int, delivery_count: int) -> None:
        self._write_fresh()
        key = INDEX_KEY.pack(qid, seq)
        old = self.txn.get(key, db=self.index)
        if old is not None:  # the count is the u32 after the message id (records.INDEX_VALUE)
            self.txn.put(key, old[:8] + U32.pack(delivery_count) + old[12:], db=self.index)

    def set_delivered_below(self, qid: int, below: int) -> None:
        counter = self.counter(qid)  # written with the counter in finish: no put of its own
        if below > counter[5]:
            counter[5] = below

    def remove_entries(self, qid: int, from_seq: int) -> None:
        self.remove_from(qid, from_seq, -1)

    def remove_from(self, qid: int, from_seq: int, limit: int) -> int:
        """Drop the queue's entries with seq >= from_seq, at most ``limit`` of them (-1: all,
        a purge; a deleted queue's slices: ``lmdb_drops``); returns how many went."""
        self._write_fresh()
        cursor = self._index()
        counter: list[int] | None = None
        removed = 0
        if cursor.set_range(INDEX_KEY.pack(qid, from_seq)):
            while removed != limit:
                key = cursor.key()
                if len(key) != INDEX_KEY.size or INDEX_KEY.unpack(key)[0] != qid:
                    break
                if counter is None:
                    counter = self.counter(qid)
                self._forget_in_bulk(self._forget_entry(key, cursor.value(), counter))
                self.spend()
                removed += 1
                if not cursor.delete():  # deletes and moves to the next entry
                    break
        return removed

    def remove_entries_below(self, qid: int, below: int) -> None:
        self._write_fresh()
        cursor = self._index()
        counter: list[int] | None = None
        if cursor.set_range(INDEX_KEY.pack(qid, 0)):
            while True:
                key = cursor.key()
                if len(key) != INDEX_KEY.size:
                    break
                key_qid, seq = INDEX_KEY.unpack(key)
                if key_qid != qid or seq >= below:
                    break
                if counter is None:
                    counter = self.counter(qid)
                self._forget_in_bulk(self._forget_entry(key, cursor.value(), counter))
                self.spend()
                if not cursor.delete():  # deletes and moves to the next entry
                    break

    def _forget_in_bulk(self, msg_id: int) -> None:
        """A purge's, truncation's or queue delete's message: when its last entry went and it
        has no refs record, its record goes now rather than at ``finish``, so removing
        millions of entries in one transaction does not hold an id per message in ``refs``
        (a 10M-entry stream's delete grew the heap past 700 MiB)."""
        if self.refs[msg_id] > 0 or msg_id in self.counted:
            return
        del self.refs[msg_id]
        cursor = self._messages_cursor
        if cursor is None:
            cursor = self._messages_cursor = self.txn.cursor(db=self.messages)
        key = U64.pack(msg_id)
        size = 0
        if cursor.set_key(key):
            size = len(cursor.value())
            cursor.delete()
        self.spend(nearby(size) if msg_id == self._last_dropped + 1 else 1)
        self._last_dropped = msg_id

    def drop_queue(self, qid: int) -> None:
        """The queue's counter goes now; its entries stay, under a drop marker, for the
        store to remove in later slices (``lmdb_drops``): this transaction stays short."""
        self.counters[qid] = None
        lmdb_drops.mark(self.txn, self.meta, qid)
        self.dropped = True

    def get_definition(self, kind: str, identity: tuple[str, ...]) -> Definition | None:
        raw = self.txn.get(definition_key(kind, identity), db=self.defs)
        return decode_definition(raw) if raw is not None else None

    def put_definition(self, kind: str, identity: tuple[str, ...],
                       definition: Definition) -> None:
        self.txn.put(definition_key(kind, identity), encode_definition(definition), db=self.defs)

    def delete_definition(self, kind: str, identity: tuple[str, ...]) -> None:
        self.txn.delete(definition_key(kind, identity), db=self.defs)

    def bindings(self) -> list[BindingDef]:
        cursor = self.txn.cursor(db=self.defs)
        out: list[BindingDef] = []
        if cursor.set_range(b"b"):
            for key, value in cursor.iternext():
                if key[:1] != b"b":
                    break
                out.append(decode_definition(value))  # type: ignore[arg-type]
        return out

    # -- deduplication windows: runs of keys under ``scope | u64 last order`` (records.py) --

    def append_dedupe(self, op: DedupeAppend) -> None:
        scope = op.scope
        cursor = self.txn.cursor(db=self.dedupe)
        if op.keys:
            _put_new_records(cursor, *encode_dedupe_runs(scope, op.first, op.keys, op.expires))
        # No page budget spent (``PageBudget``): a window's runs go to its last pages and
        # leave from its first ones, so a batch maps a few pages whatever its size, and a
        # release per thousand keys would fault every other page back in as well.
        floor = op.floor
        if not floor or not cursor.set_range(scope):
            return
        if cursor.key() == scope:  # the floor record: where the last batch left it
            if U64.unpack(cursor.value())[0] >= floor:
                return
            cursor.next()
        bound = scope + U64.pack(floor)
        while cursor.key() < bound and cursor.delete():  # runs wholly below the floor
            pass
        self.txn.put(scope, U64.pack(floor), db=self.dedupe)

    def drop_dedupe(self, scope: bytes) -> None:
        cursor = self.txn.cursor(db=self.dedupe)
        if not cursor.set_range(scope):
            return
        while cursor.key()[:len(scope)] == scope:
            if not cursor.delete():
                break

    def _forget_entry(self, key: bytes, value: bytes, counter: list[int]) -> int:
        """The entry ``key`` (index value ``value``) leaves its queue's ``counter``; returns
        its message's id."""
        msg_id, _, flags, _, size = decode_index_value(value)
        transient = flags & FLAG_TRANSIENT
        if transient:
            self.txn.delete(key, db=self.transient)
        self.refs[msg_id] = self.refcount(msg_id, True) - 1
        counter[0] -= 1
        if not counter[0]:  # empty: every total is known again
            counter[2] = counter[3] = counter[4] = 0
        elif size is None:  # written before format 3: its queue's byte total is unknown
            counter[2] = UNKNOWN
        else:
            if counter[2] != UNKNOWN:
                counter[2] -= size
            if transient:
                counter[3] -= 1
                counter[4] -= size
        return msg_id

    def finish(self, next_msg_id: int = 0, next_qid: int = 0, last_seq: int = 0) -> None:
        self._write_fresh()
        txn = self.txn
        counted = self.counted
        messages = txn.cursor(db=self.messages)  # ids ascend: deletes stay on a page
        last_deleted = -2
        near = self._near_spent  # neighbouring records' shares, spent a page at a time
        for msg_id, refs in self.refs.items():  # the usual, one entry and no record: nothing
            if refs > 1:
                txn.put(U64.pack(msg_id), U32.pack(refs), db=self.refs_db)
                continue
            if msg_id in counted:  # one entry left (absent means one) or none
                txn.delete(U64.pack(msg_id), db=self.refs_db)
            if refs <= 0:
                record = messages.pop(_pack_id(msg_id))
                if msg_id == last_deleted + 1:
                    near += nearby(len(record) if record is not None else 0)
                    if near >= 1:
                        self.spend(near)
                        near = 0.0
                else:
                    self.spend()
                last_deleted = msg_id
        if near:
            self.spend(near)
        for qid, counter in self.counters.items():
            key = COUNTER_PREFIX + U32.pack(qid)
            if counter is None:
                txn.delete(key, db=self.meta)
            else:
                txn.put(key, COUNTER.pack(*counter), db=self.meta)
        for meta_key, fmt, value in ((META_NEXT_MSG, U64, next_msg_id),
                                     (META_NEXT_QID, U64, next_qid),
                                     (META_LAST_SEQ, U64, last_seq)):
            if value:
                raw = txn.get(meta_key, db=self.meta)
                if raw is None or fmt.unpack(raw)[0] < value:
                    txn.put(meta_key, fmt.pack(value), db=self.meta)
