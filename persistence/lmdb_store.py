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

* ``meta``: format marker and version, next message id, next queue id, the
  sequence number of the last batch applied, and
  per-queue counters ``b"c" + qid`` -> (entry count, next seq, body bytes,
  transient entries and bytes, delivered below), kept up to date inside the
  write transactions so ``queue_stats`` never scans;
* ``defs``: exchanges, queues and bindings as JSON, keyed by kind + hash;
* ``messages``: message id -> record; ``refs``: message id -> entry count,
  only for counts above one (format 4: a message with an index entry and no
  refs record has one). A message is written once however many queues hold
  it and deleted with its last entry. New records are appended after the last
  page when their ids sort after it (``lmdb_writer._put_new_records``);
* ``index``: (qid, seq) -> (message id, delivery count, flags[, expires_at]);
* ``transient``: the index keys of transient entries (paged out, not meant to
  survive), so dropping them at startup does not scan the index;
* ``dedupe``: the keys of durable deduplication windows, ``scope | order`` ->
  ``expires_at | key``, written in the batch of the enqueue each key admitted (format 6;
  created when a format 5 store is opened).

Message and queue ids are handed out on the loop thread and persisted with
each batch (the highest issued), so they never repeat after a restart.

``compact_copy`` / ``compact_swap`` rewrite the file without its free pages
(``env.copy(compact=True)`` into ``<store>.compact/``, then an atomic rename);
group commit runs them between two batches.

A directory that holds anything but a Leveret store (other files, a foreign
or corrupt LMDB, a newer format) is refused with a one-line ``StoreError``:
starting empty over someone's data would silently lose it.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from itertools import islice
from pathlib import Path
from struct import error as struct_error
from typing import Any

import lmdb

from leveret.persistence import lmdb_drops
from leveret.persistence.apply import apply_batch
from leveret.persistence.batch import Batch
from leveret.persistence.lmdb_drops import SLICE
from leveret.persistence.lmdb_reads import MissingMessage, read_run
from leveret.persistence.lmdb_writer import (
    COUNTER_PREFIX,
    META_FORMAT,
    META_LAST_SEQ,
    META_NEXT_MSG,
    META_NEXT_QID,
    META_VERSION,
    LmdbWriter,
)
from leveret.persistence.mapped_memory import PageBudget, mapped_ranges, release
from leveret.persistence.records import (
    INDEX_KEY,
    U32,
    U64,
    UNKNOWN,
    decode_counter,
    decode_dedupe_run,
    decode_definition,
    decode_index_value,
    decode_message,
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
    StoreSpace,
    StoreState,
)

log = logging.getLogger(__name__)

FORMAT_MARKER = b"leveret-store"
# 2: index values may carry expires_at (records.FLAG_EXPIRES); 3: and the body size
# (records.FLAG_SIZED), and queue counters their byte totals; 4: a message with one
# entry has no refs record (lmdb_writer.LmdbWriter.refcount); 5: a FIFO queue's counter
# says which entries were delivered (batch.DeliveredBelow) instead of a mark per entry;
# 6: the ``dedupe`` database.
FORMAT_VERSION = 6
# Versions this code opens; an older one is upgraded in place (its marker is rewritten)
# because each is a subset of the next: no entry of version 1 has FLAG_EXPIRES, none of
# version 2 has FLAG_SIZED, a version 2 counter reads as "bytes not known"
# (records.decode_counter) until its queue is next empty, and every message of version 3
# has a refs record (which version 4 still reads: only absent records are new), and
# version 4 counters read as "delivered below 0" (its entries carry their own counts).
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6)
_DB_NAMES = (b"meta", b"defs", b"messages", b"refs", b"index", b"transient", b"dedupe")
_ADDED_DBS = (b"dedupe",)  # created when an older store is opened (an empty one is its state)
_LMDB_FILES = {"data.mdb", "lock.mdb"}

# Above this many queue entries, startup logs at INFO (else DEBUG).
LARGE_STORE_ENTRIES = 100_000
# Transient entries are dropped at startup in transactions of this size, so a
# huge paged-out backlog neither builds one giant transaction nor goes silent.
TRANSIENT_DROP_CHUNK = 50_000

_DATA_ERRORS = (lmdb.Error, struct_error, ValueError, KeyError)
# A compaction writes its copy in <store>.compact/, beside the store directory.
COMPACT_SUFFIX = ".compact"
# Entries read or written between two releases of the mapped pages (``PageBudget``): each
# touches two or three pages, and each page fault maps up to 64 KiB of neighbours, so one
# call maps at most some tens of MiB before they are given back. 256 gave a lower peak
# but cost a deep priority drain a third of its rate (measured on a deep priority queue's drain).
RELEASE_EVERY_ENTRIES = 1024


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LmdbStore:
    def __init__(self, path: Path, map_size: int = 1 << 40, *,
                 logger: logging.Logger | None = None, delete_slice: int = SLICE) -> None:
        self.path = Path(path)
        self._log = logger or log
        # Deleted queues' entries still to remove, a slice at a time (lmdb_drops).
        self._slices = lmdb_drops.Slices(delete_slice, self._log, self.path)
        self._env: Any = None
        self._mapped: tuple[Any, list[tuple[int, int]]] | None = None  # (env, its mapping)
        self.pages = PageBudget(self.release_memory, RELEASE_EVERY_ENTRIES)
        self._prepare_directory()
        self._map_size = map_size
        self._compact_dir = self.path.parent / (self.path.name + COMPACT_SUFFIX)
        shutil.rmtree(self._compact_dir, ignore_errors=True)  # a compaction cut short
        self._env = self._open_env()
        self._psize = int(self._env.stat()["psize"])
        try:
            self._dbs = self._open_databases()
            self._log_contents()
            self._drop_transient()
            self._slices.pending = bool(self._dropping())
        except BaseException:
            self.close()
            raise

    # -- opening --------------------------------------------------------------------------

    def _open_env(self) -> Any:
        try:
            return lmdb.open(str(self.path), map_size=self._map_size, subdir=True, create=True,
                             max_dbs=len(_DB_NAMES), lock=True, sync=True, metasync=True,
                             readahead=False, mode=0o600)  # bodies: owner only
        except lmdb.Error as exc:
            raise self._error("cannot open as an LMDB environment", exc) from exc

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
                    txn.put(META_FORMAT, FORMAT_MARKER, db=dbs[b"meta"])
                    txn.put(META_VERSION, U32.pack(FORMAT_VERSION), db=dbs[b"meta"])
                self._log.info("initialised a new store in %s", self.path)
                return dbs
            unknown = [n for n in names if n not in _DB_NAMES]
            if unknown or b"meta" not in names:
                shown = ", ".join(repr(n.decode("ascii", "replace")) for n in (unknown or names)[:3])
                raise self._error(f"is an LMDB environment but not a Leveret store "
                                  f"(it holds {shown})")
            with env.begin(write=True) as txn:
                meta = env.open_db(b"meta", txn=txn, create=False)
                marker = txn.get(META_FORMAT, db=meta)
                version = txn.get(META_VERSION, db=meta)
                if marker != FORMAT_MARKER or version is None or len(version) != U32.size:
                    raise self._error("is an LMDB environment but not a Leveret store "
                                      "(no format marker)")
                if U32.unpack(version)[0] not in READABLE_VERSIONS:
                    raise self._error(f"store format version {U32.unpack(version)[0]} is not "
                                      f"supported (this Leveret reads version {FORMAT_VERSION})")
                if U32.unpack(version)[0] != FORMAT_VERSION:
                    txn.put(META_VERSION, U32.pack(FORMAT_VERSION), db=meta)
                missing = [n.decode() for n in _DB_NAMES
                           if n not in names and n not in _ADDED_DBS]
                if missing:
                    raise self._error(f"store is incomplete (no {', '.join(missing)} database)")
                return {name: env.open_db(name, txn=txn, create=name in _ADDED_DBS)
                        for name in _DB_NAMES}
        except lmdb.Error as exc:
            raise self._error("cannot read the store (corrupt?)", exc) from exc

    def _log_contents(self) -> None:
        dbs = self._dbs
        qids = self.state().qids
        try:
            with self._env.begin() as txn:
                stats = {name.decode(): txn.stat(dbs[name])["entries"]
                         for name in (b"messages", b"index", b"transient")}
        except _DATA_ERRORS as exc:
            raise self._error("cannot read the store (corrupt?)", exc) from exc
        level = logging.INFO if stats["index"] >= LARGE_STORE_ENTRIES else logging.DEBUG
        self._log.log(level, "store %s: %d messages, %d queue entries (%d transient) in %d queues",
                      self.path, stats["messages"], stats["index"], stats["transient"], len(qids))

    def state(self) -> StoreState:
        dbs = self._dbs
        try:
            with self._require_env().begin() as txn:
                next_msg = txn.get(META_NEXT_MSG, db=dbs[b"meta"])
                next_qid = txn.get(META_NEXT_QID, db=dbs[b"meta"])
                last_seq = txn.get(META_LAST_SEQ, db=dbs[b"meta"])
                qids = {}
                for _, raw in txn.cursor(db=dbs[b"defs"]):
                    d = decode_definition(raw)
                    if isinstance(d, QueueDef):
                        qids[d.vhost, d.name] = d.qid
        except _DATA_ERRORS as exc:
            raise self._error("cannot read the store (corrupt?)", exc) from exc
        return StoreState(U64.unpack(next_msg)[0] if next_msg else 1,
                          U64.unpack(next_qid)[0] if next_qid else 1,
                          U64.unpack(last_seq)[0] if last_seq else 0, qids)

    def _dropping(self) -> list[int]:
        """Deleted queues whose entries are still to remove (``lmdb_drops``)."""
        try:
            with self._env.begin() as txn:
                return lmdb_drops.pending(txn, self._dbs[b"meta"])
        except _DATA_ERRORS as exc:
            raise self._error("cannot read the store (corrupt?)", exc) from exc

    def _drop_transient(self) -> None:
        """Transient entries were only on disk because their queue paged them out."""
        dropped = 0
        deleted = self._dropping()  # queues deleted before a crash keep no counter
        try:
            while True:
                with self._env.begin(write=True) as txn:
                    writer = LmdbWriter(txn, self._dbs, self.pages)
                    cursor = txn.cursor(db=self._dbs[b"transient"])
                    keys = list(islice(cursor.iternext(keys=True, values=False),
                                       TRANSIENT_DROP_CHUNK))
                    for key in keys:
                        writer.remove_entry(*INDEX_KEY.unpack(key))
                        txn.delete(key, db=self._dbs[b"transient"])
                    for qid in deleted:
                        writer.counters[qid] = None
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

    def load_dedupe(self, scope: bytes) -> list[tuple[bytes, int, int]]:
        """A durable deduplication window's keys: (key, order, expires_at), by order."""
        out: list[tuple[bytes, int, int]] = []
        try:
            with self._require_env().begin() as txn:
                cursor = txn.cursor(db=self._dbs[b"dedupe"])
                if cursor.set_range(scope):
                    width = len(scope)
                    floor = 0
                    for key, value in cursor.iternext():
                        if key[:width] != scope:
                            break
                        if len(key) == width:  # the floor: below it, evicted
                            floor = U64.unpack(value)[0]
                            continue
                        run = decode_dedupe_run(U64.unpack_from(key, width)[0], value)
                        out += run if run[0][1] >= floor else [k for k in run if k[1] >= floor]
        except _DATA_ERRORS as exc:
            raise self._error("cannot read a deduplication window", exc) from exc
        return out

    # -- reads (committed data only) --------------------------------------------------------------

    def queue_stats(self, qid: int) -> QueueStats:
        try:
            with self._require_env().begin() as txn:
                raw = txn.get(COUNTER_PREFIX + U32.pack(qid), db=self._dbs[b"meta"])
                if raw is None:
                    return QueueStats(0, 0, 0)
                count, next_seq, size, transient, transient_bytes, _ = decode_counter(raw)
                first_seq = 0
                cursor = txn.cursor(db=self._dbs[b"index"])
                if count and cursor.set_range(INDEX_KEY.pack(qid, 0)):
                    key_qid, seq = INDEX_KEY.unpack(cursor.key())
                    first_seq = seq if key_qid == qid else 0
                return QueueStats(count, first_seq, next_seq,
                                  None if size == UNKNOWN else size, transient, transient_bytes)
        except _DATA_ERRORS as exc:
            raise self._error(f"cannot read queue {qid}", exc) from exc

    def read_queue(self, qid: int, from_seq: int, limit: int) -> list[StoredEntry]:
        if limit <= 0:
            return []
        try:
            with self._require_env().begin() as txn:  # bytes: see lmdb_reads
                return read_run(txn, self._dbs[b"index"], self._dbs[b"messages"], qid, from_seq,
                                limit, self._delivered_below(txn, qid), self.pages)
        except MissingMessage as exc:
            raise self._error(f"corrupt: entry ({qid}, {exc.seq}) refers to missing message "
                              f"{exc.msg_id}") from exc
        except _DATA_ERRORS as exc:
            raise self._error(f"cannot read queue {qid}", exc) from exc

    def read_stamps(self, qid: int, from_seq: int, limit: int) -> list[tuple[int, int, int]]:
        out: list[tuple[int, int, int]] = []
        if limit <= 0:
            return out
        try:
            with self._require_env().begin(buffers=True) as txn:
                cursor = txn.cursor(db=self._dbs[b"index"])
                if not cursor.set_range(INDEX_KEY.pack(qid, from_seq)):
                    return out
                for key, value in cursor.iternext():
                    key_qid, seq = INDEX_KEY.unpack(key)
                    if key_qid != qid:
                        break
                    _, _, _, expires_at, size = decode_index_value(value)
                    out.append((seq, expires_at, size or 0))
                    if len(out) >= limit:
                        break
        except _DATA_ERRORS as exc:
            raise self._error(f"cannot read queue {qid}", exc) from exc
        return out

    def _delivered_below(self, txn: Any, qid: int) -> int:
        raw = txn.get(COUNTER_PREFIX + U32.pack(qid), db=self._dbs[b"meta"])
        return decode_counter(raw)[5] if raw is not None else 0

    def _stored(self, txn: Any, messages: Any, qid: int, seq: int, value: Any,
                below: int) -> StoredEntry:
        """The entry (qid, seq) with index value ``value``, its message read in ``txn``;
        delivered at least once if seq < ``below`` (``batch.DeliveredBelow``)."""
        msg_id, deliveries, _, expires_at, _ = decode_index_value(value)
        if seq < below and not deliveries:
            deliveries = 1
        record = txn.get(U64.pack(msg_id), db=messages)
        if record is None:
            raise self._error(f"corrupt: entry ({qid}, {seq}) refers to missing message {msg_id}")
        return StoredEntry(seq, deliveries, decode_message(record, msg_id), expires_at)

    def read_entries(self, qid: int, seqs: Sequence[int]) -> list[StoredEntry]:
        out: list[StoredEntry] = []
        messages, index = self._dbs[b"messages"], self._dbs[b"index"]
        try:
            with self._require_env().begin(buffers=True) as txn:
                below = self._delivered_below(txn, qid)
                spend = self.pages.spend
                for seq in seqs:
                    value = txn.get(INDEX_KEY.pack(qid, seq), db=index)
                    if value is not None:
                        out.append(self._stored(txn, messages, qid, seq, value, below))
                    spend()
        except _DATA_ERRORS as exc:
            raise self._error(f"cannot read queue {qid}", exc) from exc
        return out

    # -- group commit ------------------------------------------------------------------------------

    def write_batch(self, batch: Batch) -> None:
        if batch.live:
            self.write_batches((batch,))

    def write_batches(self, batches: Sequence[Batch]) -> None:
        """Several batches in order, in one transaction (one fsync): a cluster follower
        catching up applies what has arrived this way; each batch is applied exactly as
        ``write_batch`` would, seeing the ones before it."""
        env = self._require_env()
        slices = self._slices
        reclaiming = slices.pending
        dropped = False
        try:
            with env.begin(write=True) as txn:  # commits (and fsyncs) on exit, aborts on error
                for batch in batches:
                    writer = LmdbWriter(txn, self._dbs, self.pages)
                    apply_batch(batch, writer)
                    writer.finish(batch.next_msg_id, batch.next_qid, batch.seq)
                    dropped = dropped or writer.dropped
                if reclaiming:  # one slice rides along: a busy node writes queues off too
                    reclaiming = slices.remove(LmdbWriter(txn, self._dbs, self.pages))
        except _DATA_ERRORS as exc:
            raise self._error("write failed, batch discarded", exc) from exc
        slices.pending = reclaiming or dropped

    @property
    def reclaiming(self) -> bool:
        """Deleted queues' entries are left to remove (``lmdb_drops``)."""
        return self._slices.pending

    def reclaim(self) -> None:
        """One slice of deleted queues' entries in a transaction of its own (``lmdb_drops``;
        group commit calls it on its writer thread while no batch waits)."""
        slices = self._slices
        if not slices.pending:
            return
        try:
            with self._require_env().begin(write=True) as txn:
                more = slices.remove(LmdbWriter(txn, self._dbs, self.pages))
        except _DATA_ERRORS as exc:
            slices.pending = False  # not again and again: the next start retries
            raise self._error("cannot remove a deleted queue's entries", exc) from exc
        slices.pending = more

    # -- space ---------------------------------------------------------------------------------

    def space(self) -> StoreSpace:
        """The file's size and its free pages (a few microseconds: meta and DB headers only).

        LMDB never shrinks its file: pages freed by deletes go to its freelist and
        are reused before the file grows, so for the disk alarm they are free space.
        Free = pages up to the last one used, minus the pages every database holds
        (and the two meta pages). The freelist's own pages and pages still pinned by
        an open reader count as free: a small overestimate.
        """
        env = self._require_env()
        try:
            info = env.info()
            main = env.stat()
            psize = main["psize"]
            used = 2 + main["branch_pages"] + main["leaf_pages"] + main["overflow_pages"]
            with env.begin() as txn:
                for db in self._dbs.values():
                    st = txn.stat(db)
                    used += st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
        except lmdb.Error as exc:
            raise self._error("cannot read its size", exc) from exc
        pages = info["last_pgno"] + 1
        return StoreSpace(pages * psize, max(0, pages - used) * psize)

    def file_bytes(self) -> int:
        """The file's size as LMDB sees it (about a microsecond: for a check after each commit)."""
        env = self._require_env()
        return int((env.info()["last_pgno"] + 1) * self._psize)

    def compact_copy(self) -> Path:
        """Copy the committed data, without free pages, next to the store (and sync it)."""
        env = self._require_env()
        target = self._compact_dir
        try:
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(mode=0o700)
            env.copy(str(target), compact=True)
            os.chmod(target / "data.mdb", 0o600)  # bodies: owner only, as the original
            _fsync(target / "data.mdb")
            _fsync(target)
        except (lmdb.Error, OSError) as exc:
            shutil.rmtree(target, ignore_errors=True)
            raise self._error("compaction failed, store unchanged", exc) from exc
        return target

    def snapshot(self, target: Path) -> int:
        """Write a consistent, compacted copy of the committed data into directory ``target``
        (any thread, while batches go on being written: it reads one snapshot of the
        store); returns the sequence number of the last batch it holds. A cluster leader
        sends it to a follower whose history diverged."""
        env = self._require_env()
        try:
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(mode=0o700)
            with env.begin() as txn:
                raw = txn.get(META_LAST_SEQ, db=self._dbs[b"meta"])
                env.copy(str(target), compact=True, txn=txn)
            os.chmod(target / "data.mdb", 0o600)
        except (lmdb.Error, OSError) as exc:
            shutil.rmtree(target, ignore_errors=True)
            raise self._error("snapshot failed", exc) from exc
        return int(U64.unpack(raw)[0]) if raw else 0

    def compact_swap(self, copy: Path) -> None:
        """Put the compacted copy in place of the data file and reopen on it.

        ``rename`` is atomic: a crash leaves either the old file or the copy, both
        complete; a leftover copy directory is removed at the next open.
        """
        self.close()
        try:
            os.replace(copy / "data.mdb", self.path / "data.mdb")
            _fsync(self.path)
        except OSError as exc:
            raise self._error("cannot swap in the compacted copy", exc) from exc
        finally:
            shutil.rmtree(copy, ignore_errors=True)
            self._env = self._open_env()
        self._dbs = self._open_databases()

    def release_memory(self) -> None:
        """Unmap the data file's resident pages so they stop counting in RSS (see
        ``mapped_memory``); they stay in the page cache. The mapping is found once per
        opened environment (LMDB maps the whole ``map_size`` at once), so a release is one
        ``madvise`` call: cheap enough to run after every write."""
        env = self._env
        if env is None:
            return
        if self._mapped is None or self._mapped[0] is not env:
            self._mapped = (env, mapped_ranges(str(self.path / "data.mdb")))
        release(self._mapped[1])

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
