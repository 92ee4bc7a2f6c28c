"""The durable store: one LMDB environment, one write transaction per batch.

Theory of operation
-------------------
The loop thread records operations into a ``batch.Recorder`` (no LMDB calls);
``write_batch`` applies a whole batch in one write transaction and commits it
with LMDB's default ``sync=True, metasync=True``: when it returns, the batch
is on stable storage and survives kill -9 or power loss; when it raises
``StoreError`` the transaction was aborted and nothing of the batch exists.
LMDB allows one writer and any number of readers, each reader seeing the
last committed state, so ``read_queue`` on the loop thread runs concurrently
with a commit on the group-commit thread (py-lmdb releases the GIL while it
writes and fsyncs).

Named databases (``records.py`` has the byte layouts):

* ``meta``: format marker and version, next message id, next queue id, and
  per-queue counters ``b"c" + qid`` -> (entry count, next seq), kept up to
  date inside the write transactions so ``queue_stats`` never scans;
* ``defs``: exchanges, queues and bindings as JSON, keyed by kind + hash;
* ``messages``: message id -> record; ``refs``: message id -> entry count.
  A message is written once however many queues hold it and deleted with
  its last entry;
* ``index``: (qid, seq) -> (message id, delivery count, flags[, expires_at]);
* ``transient``: the index keys of transient entries (paged out, not meant to
  survive), so dropping them at startup does not scan the index.

Message and queue ids are handed out on the loop thread and persisted with
each batch (the highest issued), so they never repeat after a restart.

A directory that holds anything but a Leveret store (other files, a foreign
or corrupt LMDB, a newer format) is refused with a one-line ``StoreError``:
starting empty over someone's data would silently lose it.
"""

from __future__ import annotations

import logging
import os
from itertools import islice
from pathlib import Path
from struct import error as StructError
from typing import Any

import lmdb

from leveret.persistence.mapped_memory import mapped_ranges, release
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
from leveret.persistence.records import (
    COUNTER,
    FLAG_TRANSIENT,
    INDEX_KEY,
    U32,
    U64,
    decode_definition,
    decode_index_value,
    decode_message,
    definition_key,
    encode_definition,
    encode_index_value,
    encode_message,
)
from leveret.persistence.store import (
    AccessDef,
    Definitions,
    ExchangeDef,
    PolicyDef,
    QueueDef,
    QueueStats,
    StoredEntry,
    StoreError,
)

log = logging.getLogger(__name__)

FORMAT_MARKER = b"leveret-store"
FORMAT_VERSION = 2  # 2: index values may carry expires_at (records.FLAG_EXPIRES)
# Versions this code opens; an older one is upgraded in place (its marker is rewritten)
# because version 1 is a subset of version 2 (no entry has FLAG_EXPIRES).
READABLE_VERSIONS = (1, 2)
_DB_NAMES = (b"meta", b"defs", b"messages", b"refs", b"index", b"transient")
_LMDB_FILES = {"data.mdb", "lock.mdb"}
_META_FORMAT = b"format"
_META_VERSION = b"version"
_META_NEXT_MSG = b"next_msg_id"
_META_NEXT_QID = b"next_qid"
_COUNTER_PREFIX = b"c"

# Above this many queue entries, startup logs at INFO (else DEBUG).
LARGE_STORE_ENTRIES = 100_000
# Transient entries are dropped at startup in transactions of this size, so a
# huge paged-out backlog neither builds one giant transaction nor goes silent.
TRANSIENT_DROP_CHUNK = 50_000

_DATA_ERRORS = (lmdb.Error, StructError, ValueError, KeyError)


class LmdbStore(RecordingStore):
    def __init__(self, path: Path, map_size: int = 1 << 40, *,
                 logger: logging.Logger | None = None) -> None:
        self.path = Path(path)
        self._log = logger or log
        self._env: Any = None
        self._prepare_directory()
        try:
            self._env = lmdb.open(str(self.path), map_size=map_size, subdir=True, create=True,
                                  max_dbs=len(_DB_NAMES), lock=True, sync=True, metasync=True,
                                  readahead=False, mode=0o600)  # bodies: owner only
        except lmdb.Error as exc:
            raise self._error("cannot open as an LMDB environment", exc) from exc
        try:
            self._dbs = self._open_databases()
            self._recorder, self._qids = self._load_state()
            self._drop_transient()
        except BaseException:
            self.close()
            raise

    # -- opening --------------------------------------------------------------------------

    def _error(self, problem: str, exc: BaseException | None = None) -> StoreError:
        detail = f": {exc}" if exc is not None else ""
        return StoreError(f"store {self.path}: {problem}{detail}")

    def _prepare_directory(self) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise self._error("exists and is not a directory")
        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            names = set(os.listdir(self.path))
        except OSError as exc:
            raise self._error("cannot create or list the directory", exc) from exc
        if "data.mdb" not in names and names - _LMDB_FILES:
            shown = ", ".join(sorted(names - _LMDB_FILES)[:3])
            raise self._error(f"directory holds files that are not a Leveret store ({shown})")
        for target in (self.path, self.path / "data.mdb", self.path / "lock.mdb"):
            if target.exists() and not os.access(target, os.R_OK | os.W_OK):
                raise self._error(f"{target.name} is not writable (check owner and permissions)")

    def _open_databases(self) -> dict[bytes, Any]:
        env = self._env
        try:
            with env.begin() as txn:
                names = [bytes(key) for key, _ in txn.cursor()]
            if not names:  # brand new (or created but never initialised): initialise
                with env.begin(write=True) as txn:
                    dbs = {name: env.open_db(name, txn=txn, create=True) for name in _DB_NAMES}
                    txn.put(_META_FORMAT, FORMAT_MARKER, db=dbs[b"meta"])
                    txn.put(_META_VERSION, U32.pack(FORMAT_VERSION), db=dbs[b"meta"])
                self._log.info("initialised a new store in %s", self.path)
                return dbs
            unknown = [n for n in names if n not in _DB_NAMES]
            if unknown or b"meta" not in names:
                shown = ", ".join(repr(n.decode("ascii", "replace")) for n in (unknown or names)[:3])
                raise self._error(f"is an LMDB environment but not a Leveret store "
                                  f"(it holds {shown})")
            with env.begin(write=True) as txn:
                meta = env.open_db(b"meta", txn=txn, create=False)
                marker = txn.get(_META_FORMAT, db=meta)
                version = txn.get(_META_VERSION, db=meta)
                if marker != FORMAT_MARKER or version is None or len(version) != U32.size:
                    raise self._error("is an LMDB environment but not a Leveret store "
                                      "(no format marker)")
                if U32.unpack(version)[0] not in READABLE_VERSIONS:
                    raise self._error(f"store format version {U32.unpack(version)[0]} is not "
                                      f"supported (this Leveret reads version {FORMAT_VERSION})")
                if U32.unpack(version)[0] != FORMAT_VERSION:
                    txn.put(_META_VERSION, U32.pack(FORMAT_VERSION), db=meta)
                missing = [n.decode() for n in _DB_NAMES if n not in names]
                if missing:
                    raise self._error(f"store is incomplete (no {', '.join(missing)} database)")
                return {name: env.open_db(name, txn=txn, create=False) for name in _DB_NAMES}
        except lmdb.Error as exc:
            raise self._error("cannot read the store (corrupt?)", exc) from exc

    def _load_state(self) -> tuple[Recorder, dict[tuple[str, str], int]]:
        dbs = self._dbs
        try:
            with self._env.begin() as txn:
                next_msg = txn.get(_META_NEXT_MSG, db=dbs[b"meta"])
                next_qid = txn.get(_META_NEXT_QID, db=dbs[b"meta"])
                qids = {}
                for _, raw in txn.cursor(db=dbs[b"defs"]):
                    d = decode_definition(raw)
                    if isinstance(d, QueueDef):
                        qids[d.vhost, d.name] = d.qid
                stats = {name.decode(): txn.stat(dbs[name])["entries"]
                         for name in (b"messages", b"index", b"transient")}
        except _DATA_ERRORS as exc:
            raise self._error("cannot read the store (corrupt?)", exc) from exc
        level = logging.INFO if stats["index"] >= LARGE_STORE_ENTRIES else logging.DEBUG
        self._log.log(level, "store %s: %d messages, %d queue entries (%d transient) in %d queues",
                      self.path, stats["messages"], stats["index"], stats["transient"], len(qids))
        recorder = Recorder(U64.unpack(next_msg)[0] if next_msg else 1,
                            U64.unpack(next_qid)[0] if next_qid else 1)
        return recorder, qids

    def _drop_transient(self) -> None:
        """Transient entries were only on disk because their queue paged them out."""
        dropped = 0
        try:
            while True:
                with self._env.begin(write=True) as txn:
                    writer = _Writer(txn, self._dbs)
                    cursor = txn.cursor(db=self._dbs[b"transient"])
                    keys = list(islice(cursor.iternext(keys=True, values=False),
                                       TRANSIENT_DROP_CHUNK))
                    for key in keys:
                        writer.remove(*INDEX_KEY.unpack(key))
                        txn.delete(key, db=self._dbs[b"transient"])
                    writer.finish()
                if not keys:
                    break
                dropped += len(keys)
                if len(keys) == TRANSIENT_DROP_CHUNK:
                    self._log.info("store %s: dropped %d transient entries so far",
                                   self.path, dropped)
        except _DATA_ERRORS as exc:
            raise self._error("cannot drop transient entries", exc) from exc
        if dropped:
            self._log.info("store %s: dropped %d transient entries", self.path, dropped)

    # -- definitions -------------------------------------------------------------------------

    def load_definitions(self) -> Definitions:
        result = Definitions()
        try:
            with self._require_env().begin() as txn:
                for _, raw in txn.cursor(db=self._dbs[b"defs"]):
                    d = decode_definition(raw)
                    if isinstance(d, ExchangeDef):
                        result.exchanges.append(d)
                    elif isinstance(d, QueueDef):
                        result.queues.append(d)
                    elif isinstance(d, PolicyDef):
                        result.policies.append(d)
                    elif isinstance(d, AccessDef):
                        result.access.append(d)
                    else:
                        result.bindings.append(d)
        except _DATA_ERRORS as exc:
            raise self._error("cannot read definitions", exc) from exc
        return result


    def _definition(self, definition: Any) -> Any:
        return encode_definition(definition)

    # -- queue entries -------------------------------------------------------------------------

    # -- reads (committed data only) --------------------------------------------------------------

    def queue_stats(self, qid: int) -> QueueStats:
        try:
            with self._require_env().begin() as txn:
                raw = txn.get(_COUNTER_PREFIX + U32.pack(qid), db=self._dbs[b"meta"])
                if raw is None:
                    return QueueStats(0, 0, 0)
                count, next_seq = COUNTER.unpack(raw)
                first_seq = 0
                cursor = txn.cursor(db=self._dbs[b"index"])
                if count and cursor.set_range(INDEX_KEY.pack(qid, 0)):
                    key_qid, seq = INDEX_KEY.unpack(cursor.key())
                    first_seq = seq if key_qid == qid else 0
                return QueueStats(count, first_seq, next_seq)
        except _DATA_ERRORS as exc:
            raise self._error(f"cannot read queue {qid}", exc) from exc

    def read_queue(self, qid: int, from_seq: int, limit: int) -> list[StoredEntry]:
        out: list[StoredEntry] = []
        if limit <= 0:
            return out
        messages = self._dbs[b"messages"]
        try:
            with self._require_env().begin(buffers=True) as txn:
                cursor = txn.cursor(db=self._dbs[b"index"])
                if not cursor.set_range(INDEX_KEY.pack(qid, from_seq)):
                    return out
                for key, value in cursor.iternext():
                    key_qid, seq = INDEX_KEY.unpack(key)
                    if key_qid != qid:
                        break
                    msg_id, deliveries, _, expires_at = decode_index_value(value)
                    record = txn.get(U64.pack(msg_id), db=messages)
                    if record is None:
                        raise self._error(f"corrupt: entry ({qid}, {seq}) refers to missing "
                                          f"message {msg_id}")
                    out.append(StoredEntry(seq, deliveries, decode_message(record, msg_id),
                                           expires_at))
                    if len(out) >= limit:
                        break
        except _DATA_ERRORS as exc:
            raise self._error(f"cannot read queue {qid}", exc) from exc
        return out

    # -- group commit ------------------------------------------------------------------------------

    def write_batch(self, batch: Batch) -> None:
        if batch.live == 0:
            return
        env = self._require_env()
        try:
            with env.begin(write=True) as txn:  # commits (and fsyncs) on exit, aborts on error
                writer = _Writer(txn, self._dbs)
                for op in batch.ops:
                    writer.apply(op)
                writer.finish(batch.next_msg_id, batch.next_qid)
        except _DATA_ERRORS as exc:
            raise self._error("write failed, batch discarded", exc) from exc

    def release_memory(self) -> None:
        """Unmap the data file's resident pages so they stop counting in RSS (see
        ``mapped_memory``); they stay in the page cache."""
        if self._env is not None:
            release(mapped_ranges(str(self.path / "data.mdb")))

    def close(self) -> None:
        env, self._env = self._env, None
        if env is not None:
            env.close()

    def _require_env(self) -> Any:
        if self._env is None:
            raise self._error("is closed")
        return self._env

    # -- test introspection -------------------------------------------------------------------------

    def _message_count(self) -> int:
        with self._require_env().begin() as txn:
            return int(txn.stat(self._dbs[b"messages"])["entries"])

    def _entry_count(self) -> int:
        with self._require_env().begin() as txn:
            return int(txn.stat(self._dbs[b"index"])["entries"])


class _Writer:
    """Applies operations inside one write transaction.

    Reference counts and queue counters are cached for the transaction and
    written once in ``finish`` (a message routed to many queues in one batch
    costs one refs write, not one per queue).
    """

    def __init__(self, txn: Any, dbs: dict[bytes, Any]) -> None:
        self.txn = txn
        self.meta, self.defs = dbs[b"meta"], dbs[b"defs"]
        self.messages, self.refs_db = dbs[b"messages"], dbs[b"refs"]
        self.index, self.transient = dbs[b"index"], dbs[b"transient"]
        self.refs: dict[int, int] = {}
        self.counters: dict[int, list[int] | None] = {}  # None: delete (queue deleted)

    def apply(self, op: Any) -> None:
        cls = type(op)
        if cls is Enqueue:
            if not op.cancelled:
                self.enqueue(op)
        elif cls is Remove:
            self.remove(op.qid, op.seq)
        elif cls is MarkDelivered:
            if not op.cancelled:
                self.mark_delivered(op.qid, op.seq, op.delivery_count)
        elif cls is Purge:
            self.purge(op.qid, op.from_seq)
        elif cls is DeleteQueue:
            self.delete_queue(op)
        elif cls is DeleteExchange:
            self.txn.delete(definition_key("x", (op.vhost, op.name)), db=self.defs)
            self.drop_bindings(lambda b: b.vhost == op.vhost and (b.source == op.name or (
                b.destination_type == "exchange" and b.destination == op.name)))
        elif cls is PutDef:
            self.txn.put(definition_key(op.kind, op.identity), op.payload, db=self.defs)
        elif cls is DeleteDef:
            self.txn.delete(definition_key(op.kind, op.identity), db=self.defs)
        else:
            raise TypeError(f"unknown store operation {op!r}")

    def refcount(self, msg_id: int) -> int:
        refs = self.refs.get(msg_id)
        if refs is None:
            raw = self.txn.get(U64.pack(msg_id), db=self.refs_db)
            refs = self.refs[msg_id] = U32.unpack(raw)[0] if raw is not None else 0
        return refs

    def counter(self, qid: int) -> list[int]:
        if qid in self.counters:
            counter = self.counters[qid]
            if counter is None:  # deleted earlier in this transaction: starts afresh
                counter = self.counters[qid] = [0, 0]
            return counter
        raw = self.txn.get(_COUNTER_PREFIX + U32.pack(qid), db=self.meta)
        counter = self.counters[qid] = list(COUNTER.unpack(raw)) if raw else [0, 0]
        return counter

    def enqueue(self, op: Enqueue) -> None:
        message = op.message
        msg_id = message.store_id
        refs = self.refcount(msg_id)
        if refs == 0:  # first entry on disk: write the record (once for all queues)
            self.txn.put(U64.pack(msg_id), encode_message(message), db=self.messages)
        self.refs[msg_id] = refs + 1
        key = INDEX_KEY.pack(op.qid, op.seq)
        flags = FLAG_TRANSIENT if op.transient else 0
        old = self.txn.replace(key, encode_index_value(msg_id, op.delivery_count, flags,
                                                       op.expires_at), db=self.index)
        counter = self.counter(op.qid)
        if old is None:
            counter[0] += 1
        else:  # (qid, seq) reused: the old entry is replaced
            self._forget_entry(key, old)
        counter[1] = max(counter[1], op.seq + 1)
        if op.transient:
            self.txn.put(key, b"", db=self.transient)

    def remove(self, qid: int, seq: int) -> None:
        key = INDEX_KEY.pack(qid, seq)
        old = self.txn.pop(key, db=self.index)
        if old is not None:  # absent: its enqueue was in a batch that failed
            self._forget_entry(key, old)
            self.counter(qid)[0] -= 1

    def mark_delivered(self, qid: int, seq: int, delivery_count: int) -> None:
        key = INDEX_KEY.pack(qid, seq)
        old = self.txn.get(key, db=self.index)
        if old is not None:
            msg_id, _, flags, expires_at = decode_index_value(old)
            self.txn.put(key, encode_index_value(msg_id, delivery_count, flags, expires_at),
                         db=self.index)

    def purge(self, qid: int, from_seq: int) -> None:
        cursor = self.txn.cursor(db=self.index)
        removed = 0
        if cursor.set_range(INDEX_KEY.pack(qid, from_seq)):
            while True:
                key = cursor.key()
                if len(key) != INDEX_KEY.size or INDEX_KEY.unpack(key)[0] != qid:
                    break
                self._forget_entry(key, cursor.value())
                removed += 1
                if not cursor.delete():  # deletes and moves to the next entry
                    break
        if removed:
            self.counter(qid)[0] -= removed

    def delete_queue(self, op: DeleteQueue) -> None:
        self.purge(op.qid, 0)
        self.counters[op.qid] = None
        def_key = definition_key("q", (op.vhost, op.name))
        raw = self.txn.get(def_key, db=self.defs)
        if raw is not None and getattr(decode_definition(raw), "qid", None) == op.qid:
            self.txn.delete(def_key, db=self.defs)
        self.drop_bindings(lambda b: b.vhost == op.vhost and b.destination_type == "queue"
                           and b.destination == op.name)

    def drop_bindings(self, matches: Any) -> None:
        cursor = self.txn.cursor(db=self.defs)
        if not cursor.set_range(b"b"):
            return
        while cursor.key()[:1] == b"b":
            if matches(decode_definition(cursor.value())):
                if not cursor.delete():
                    break
            elif not cursor.next():
                break

    def _forget_entry(self, key: bytes, value: bytes) -> None:
        msg_id, _, flags, _ = decode_index_value(value)
        if flags & FLAG_TRANSIENT:
            self.txn.delete(key, db=self.transient)
        self.refs[msg_id] = self.refcount(msg_id) - 1

    def finish(self, next_msg_id: int = 0, next_qid: int = 0) -> None:
        txn = self.txn
        for msg_id, refs in self.refs.items():
            key = U64.pack(msg_id)
            if refs > 0:
                txn.put(key, U32.pack(refs), db=self.refs_db)
            else:
                txn.delete(key, db=self.refs_db)
                txn.delete(key, db=self.messages)
        for qid, counter in self.counters.items():
            key = _COUNTER_PREFIX + U32.pack(qid)
            if counter is None:
                txn.delete(key, db=self.meta)
            else:
                txn.put(key, COUNTER.pack(*counter), db=self.meta)
        for meta_key, fmt, value in ((_META_NEXT_MSG, U64, next_msg_id),
                                     (_META_NEXT_QID, U64, next_qid)):
            if value:
                raw = txn.get(meta_key, db=self.meta)
                if raw is None or fmt.unpack(raw)[0] < value:
                    txn.put(meta_key, fmt.pack(value), db=self.meta)
