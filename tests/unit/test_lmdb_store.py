"""LMDB-specific behaviour: reopening, threads, failed batches, bad directories, kill -9."""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import time
import tracemalloc
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import lmdb
import pytest

from leveret.model.message import Message
from leveret.persistence.lmdb_store import FORMAT_VERSION, LmdbStore
from leveret.persistence.lmdb_writer import COUNTER_PREFIX
from leveret.persistence.mapped_memory import PageBudget
from leveret.persistence.records import (
    COUNTER_V2,
    COUNTER_V3,
    FLAG_SIZED,
    INDEX_VALUE,
    U32,
    U64,
    decode_counter,
    decode_index_value,
)
from leveret.persistence.store import QueueDef, QueueStats, StoreError

from .store_harness import recording

PROPS = b"\x10\x00\x02"


def msg(body: bytes) -> Message:
    return Message("", "q", PROPS, body)


def commit(store: LmdbStore) -> None:
    store.write_batch(store.take_batch())


def seqs(store: LmdbStore, qid: int) -> list[int]:
    return [e.seq for e in store.read_queue(qid, 0, 1 << 30)]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "store"


def test_new_directory_is_created_and_reopened(path: Path) -> None:
    store = recording(LmdbStore(path))
    qid = store.put_queue(QueueDef("/", "q"))
    store.enqueue(qid, 0, msg(b"hello"))
    commit(store)
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        store.read_queue(qid, 0, 1)

    store = recording(LmdbStore(path))
    assert [e.message.body for e in store.read_queue(qid, 0, 10)] == [b"hello"]
    assert [q.name for q in store.load_definitions().queues] == ["q"]
    store.close()


def test_empty_existing_directory_is_initialised(path: Path) -> None:
    path.mkdir()
    LmdbStore(path).close()
    assert (path / "data.mdb").exists()


def test_startup_logs_counts(path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = recording(LmdbStore(path))
    qid = store.put_queue(QueueDef("/", "q"))
    for seq in range(3):
        store.enqueue(qid, seq, msg(b"x"), transient=seq == 2)
    commit(store)
    store.close()
    logger = logging.getLogger("test.store")
    with caplog.at_level(logging.DEBUG, logger="test.store"):
        LmdbStore(path, logger=logger).close()
    text = caplog.text
    assert "3 messages, 3 queue entries (1 transient) in 1 queues" in text
    assert "dropped 1 transient entries" in text


def test_batch_written_from_a_thread_while_loop_records_and_reads(path: Path) -> None:
    """The group-commit shape: one writer thread, the loop recording the next batch."""
    store = recording(LmdbStore(path))
    qid = store.put_queue(QueueDef("/", "q"))
    rng = random.Random(7)
    boundaries = {0}  # a reader may only ever see whole batches
    seq = 0
    pending: Future[None] | None = None
    with ThreadPoolExecutor(1) as writer:
        while seq < 3000:
            for _ in range(rng.randint(1, 40)):
                store.enqueue(qid, seq, msg(b"%d" % seq))
                seq += 1
            if pending is None or pending.done():
                if pending is not None:
                    pending.result()
                boundaries.add(seq)
                pending = writer.submit(store.write_batch, store.take_batch())
            count = store.queue_stats(qid).count
            assert count in boundaries
            # A commit may land between the two reads: the tail then ends at a later batch.
            start = max(0, count - 5)
            tail = [e.seq for e in store.read_queue(qid, start, 1 << 30)]
            end = start + len(tail)
            assert tail == list(range(start, end))
            assert end >= count and end in boundaries
        assert pending is not None
        pending.result()
    commit(store)
    assert store.queue_stats(qid) == QueueStats(seq, 0, seq, sum(len(b"%d" % i)
                                                                for i in range(seq)))
    assert seqs(store, qid) == list(range(seq))
    store.close()


def test_failed_batch_has_no_effect_and_store_stays_usable(path: Path) -> None:
    store = recording(LmdbStore(path, map_size=1 << 20))  # 1 MiB: a 2 MiB body cannot fit
    qid = store.put_queue(QueueDef("/", "q"))
    kept = [msg(b"kept%d" % i) for i in range(3)]
    for seq, m in enumerate(kept):
        store.enqueue(qid, seq, m)
    commit(store)
    before = (seqs(store, qid), store.queue_stats(qid), store._message_count())

    store.mark_delivered(qid, 0, kept[0], 2)
    store.remove(qid, 1, kept[1])
    store.enqueue(qid, 3, msg(b"small"))
    store.enqueue(qid, 4, msg(b"x" * (2 << 20)))
    other = store.put_queue(QueueDef("/", "other"))
    with pytest.raises(StoreError, match=str(path)) as failure:
        commit(store)
    assert "MDB_MAP_FULL" in str(failure.value) or "map" in str(failure.value).lower()

    assert (seqs(store, qid), store.queue_stats(qid), store._message_count()) == before
    assert store.read_queue(qid, 0, 1)[0].delivery_count == 0
    assert [q.name for q in store.load_definitions().queues] == ["q"]

    # Usable afterwards; removes of entries from the failed batch are harmless no-ops.
    store.remove(qid, 3, msg(b"small"))
    store.enqueue(qid, 5, msg(b"after"))
    commit(store)
    store.close()
    store = recording(LmdbStore(path, map_size=1 << 20))
    assert seqs(store, qid) == [0, 1, 2, 5]
    assert store.queue_stats(qid) == QueueStats(4, 0, 6, len(b"kept0kept1kept2after"))
    assert store._message_count() == 4
    assert store.put_queue(QueueDef("/", "other")) > other  # ids of the failed batch not reused
    store.close()


def test_corrupt_data_file_is_refused(path: Path) -> None:
    store = recording(LmdbStore(path))
    qid = store.put_queue(QueueDef("/", "q"))
    store.enqueue(qid, 0, msg(b"x"))
    commit(store)
    store.close()
    data = path / "data.mdb"
    data.write_bytes(random.Random(1).randbytes(data.stat().st_size))
    with pytest.raises(StoreError, match=str(path)):
        LmdbStore(path)


def test_small_garbage_data_file_is_refused(path: Path) -> None:
    path.mkdir()
    (path / "data.mdb").write_bytes(b"definitely not LMDB\n")
    with pytest.raises(StoreError, match=str(path)):
        LmdbStore(path)
    assert (path / "data.mdb").read_bytes() == b"definitely not LMDB\n"  # left untouched


def test_foreign_lmdb_with_other_databases_is_refused(path: Path) -> None:
    env = lmdb.open(str(path), max_dbs=4)
    users = env.open_db(b"users")
    with env.begin(write=True) as txn:
        txn.put(b"alice", b"admin", db=users)
    env.close()
    with pytest.raises(StoreError, match=f"{path}.*not a Leveret store"):
        LmdbStore(path)


def test_foreign_lmdb_with_plain_keys_is_refused(path: Path) -> None:
    env = lmdb.open(str(path))
    with env.begin(write=True) as txn:
        txn.put(b"meta", b"not a database")
    env.close()
    with pytest.raises(StoreError, match=str(path)):
        LmdbStore(path)


def test_newer_format_version_is_refused(path: Path) -> None:
    LmdbStore(path).close()
    env = lmdb.open(str(path), max_dbs=8)
    meta = env.open_db(b"meta")
    with env.begin(write=True) as txn:
        txn.put(b"version", U32.pack(99), db=meta)
    env.close()
    with pytest.raises(StoreError, match="format version 99"):
        LmdbStore(path)


def test_version_1_store_is_opened_and_upgraded(path: Path) -> None:
    """Version 2 only adds an optional expires_at to index values: v1 stores are read as is."""
    store = recording(LmdbStore(path))
    qid = store.put_queue(QueueDef("/", "q"))
    m = Message("", "q", b"\x10\x00\x02", b"old")
    store.enqueue(qid, 0, m)
    store.write_batch(store.take_batch())
    store.close()
    env = lmdb.open(str(path), max_dbs=8)
    meta = env.open_db(b"meta")
    with env.begin(write=True) as txn:
        txn.put(b"version", U32.pack(1), db=meta)
    env.close()
    store = recording(LmdbStore(path))
    [entry] = store.read_queue(qid, 0, 10)
    assert entry.message.body == b"old" and entry.expires_at == 0
    store.close()
    env = lmdb.open(str(path), max_dbs=8)
    with env.begin() as txn:
        version = U32.unpack(txn.get(b"version", db=env.open_db(b"meta", txn=txn)))[0]
        assert version == FORMAT_VERSION == 6
    env.close()


def _refs(path: Path) -> dict[int, int]:
    """The refs database of a closed store: message id -> explicit entry count."""
    env = lmdb.open(str(path), max_dbs=8)
    with env.begin() as txn:
        out = {U64.unpack(k)[0]: U32.unpack(v)[0]
               for k, v in txn.cursor(db=env.open_db(b"refs", txn=txn))}
    env.close()
    return out


def _messages(path: Path) -> int:
    """Message records in a closed store."""
    env = lmdb.open(str(path), max_dbs=8)
    with env.begin() as txn:
        count = txn.stat(env.open_db(b"messages", txn=txn))["entries"]
    env.close()
    return count


def test_refs_records_only_for_messages_in_more_than_one_queue(path: Path) -> None:
    """Format 4: one entry, no refs record (the usual message costs no refs write); two
    or more, a record; an older message gaining an entry later is counted from its record."""
    store = recording(LmdbStore(path))
    a, b = store.put_queue(QueueDef("/", "a")), store.put_queue(QueueDef("/", "b"))
    single, shared, later = msg(b"single"), msg(b"shared"), msg(b"later")
    store.enqueue(a, 0, single)
    store.enqueue(a, 1, shared)
    store.enqueue(b, 0, shared)
    store.enqueue(a, 2, later)
    commit(store)
    store.enqueue(b, 1, later)  # a committed message (no refs record) gains an entry
    commit(store)
    store.close()
    assert _refs(path) == {shared.store_id: 2, later.store_id: 2}
    store = recording(LmdbStore(path))
    store.remove(a, 1, shared)
    store.remove(a, 2, later)
    commit(store)
    assert [e.message.body for e in store.read_queue(b, 0, 10)] == [b"shared", b"later"]
    store.close()
    assert _refs(path) == {}  # one entry left each: absent means one
    store = recording(LmdbStore(path))
    for seq, m in ((0, shared), (1, later)):
        store.remove(b, seq, m)
    store.remove(a, 0, single)
    commit(store)
    store.close()
    assert _messages(path) == 0


def test_version_3_refs_record_of_one_is_read_and_dropped(path: Path) -> None:
    """Version 3 wrote a refs record for every message: a count of one still reads as one."""
    store = recording(LmdbStore(path))
    qid = store.put_queue(QueueDef("/", "q"))
    m = msg(b"v3")
    store.enqueue(qid, 0, m)
    commit(store)
    store.close()
    assert _refs(path) == {}
    env = lmdb.open(str(path), max_dbs=8)
    with env.begin(write=True) as txn:
        txn.put(U64.pack(m.store_id), U32.pack(1), db=env.open_db(b"refs", txn=txn))
        txn.put(b"version", U32.pack(3), db=env.open_db(b"meta", txn=txn))
    env.close()
    store = recording(LmdbStore(path))
    [entry] = store.read_queue(qid, 0, 10)
    store.remove(qid, 0, entry.message)
    commit(store)
    store.close()
    assert _refs(path) == {}
    assert _messages(path) == 0


def _as_format_2(path: Path) -> None:
    """Rewrite a closed store as version 2 wrote it: index values without a body size,
    queue counters of two fields (entries, next seq), version marker 2."""
    env = lmdb.open(str(path), max_dbs=8)
    with env.begin(write=True) as txn:
        meta, index = env.open_db(b"meta", txn=txn), env.open_db(b"index", txn=txn)
        for key, value in list(txn.cursor(db=index)):
            msg_id, deliveries, flags, expires_at, _ = decode_index_value(value)
            old = INDEX_VALUE.pack(msg_id, deliveries, flags & ~FLAG_SIZED)
            txn.put(key, old + (U64.pack(expires_at) if expires_at else b""), db=index)
        for key, value in list(txn.cursor(db=meta)):
            if key[:1] == COUNTER_PREFIX and len(key) == 1 + U32.size:
                txn.put(key, COUNTER_V2.pack(*decode_counter(value)[:2]), db=meta)
        txn.put(b"version", U32.pack(2), db=meta)
    env.close()


def test_version_2_store_opens_without_byte_totals_until_a_queue_empties(path: Path) -> None:
    """A version 2 store has no body sizes: its non-empty queues report their bytes as
    not known (None), still read, count and drop transient entries, and know their bytes
    again (exactly) once empty. New entries carry their size from then on."""
    store = recording(LmdbStore(path))
    qid = store.put_queue(QueueDef("/", "q"))
    empty = store.put_queue(QueueDef("/", "empty"))
    for seq, body in enumerate((b"aa", b"bbbb", b"cccccc")):
        store.enqueue(qid, seq, msg(body), transient=seq == 2, expires_at=seq * 1000)
    store.enqueue(empty, 0, msg(b"gone"))
    commit(store)
    store.remove(empty, 0, msg(b"gone"))
    commit(store)
    store.close()
    _as_format_2(path)
    store = recording(LmdbStore(path))  # drops the transient entry (size not known)
    assert [(e.seq, e.message.body, e.expires_at) for e in store.read_queue(qid, 0, 10)] == [
        (0, b"aa", 0), (1, b"bbbb", 1000)]
    assert store.queue_stats(qid) == QueueStats(2, 0, 3, None)
    assert store.queue_stats(empty) == QueueStats(0, 0, 1)
    store.mark_delivered(qid, 1, msg(b"bbbb"), 1)
    store.enqueue(qid, 3, msg(b"new"), transient=True)  # sized: counted among transients
    commit(store)
    assert store.queue_stats(qid) == QueueStats(3, 0, 4, None, 1, 3)
    assert [e.delivery_count for e in store.read_queue(qid, 0, 10)] == [0, 1, 0]
    for entry in store.read_queue(qid, 0, 10):
        store.remove(qid, entry.seq, entry.message)
    commit(store)
    assert store.queue_stats(qid) == QueueStats(0, 0, 4)
    store.enqueue(qid, 4, msg(b"sized"))
    commit(store)
    store.close()
    store = recording(LmdbStore(path))
    assert store.queue_stats(qid) == QueueStats(1, 4, 5, 5)
    store.close()


def test_directory_with_other_files_is_refused(path: Path) -> None:
    path.mkdir()
    (path / "notes.txt").write_text("mine")
    with pytest.raises(StoreError, match=f"{path}.*notes.txt"):
        LmdbStore(path)


def test_path_that_is_a_file_is_refused(path: Path) -> None:
    path.write_text("")
    with pytest.raises(StoreError, match="not a directory"):
        LmdbStore(path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_directory_is_refused(path: Path) -> None:
    LmdbStore(path).close()
    path.chmod(0o500)
    try:
        with pytest.raises(StoreError, match="not writable"):
            LmdbStore(path)
    finally:
        path.chmod(0o700)


# -- kill -9 ----------------------------------------------------------------------------------

WRITER = """
import sys
from pathlib import Path
from leveret.persistence.batch import Recorder
from leveret.persistence.lmdb_store import LmdbStore
from leveret.persistence.store import QueueDef
from leveret.model.message import Message

store = LmdbStore(Path(sys.argv[1]))
recorder = Recorder(store.state())
qid = recorder.put_queue(QueueDef("/", "q"))
seq = batch = 0
while True:
    for _ in range(1 + batch % 7):
        recorder.enqueue(qid, seq, Message("", "q", b"\\x10\\x00\\x02", b"%d" % seq * 100))
        seq += 1
    store.write_batch(recorder.take_batch())
    print(seq, flush=True)  # everything below seq is confirmed
    batch += 1
"""


def batch_ends(limit: int) -> set[int]:
    ends, seq, batch = {0}, 0, 0
    while seq <= limit:
        seq += 1 + batch % 7
        ends.add(seq)
        batch += 1
    return ends


@pytest.mark.parametrize("round_", range(3))
def test_confirmed_batches_survive_kill_9(path: Path, round_: int) -> None:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline()  # started and committed one batch
        time.sleep(random.uniform(0.05, 0.6))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reported = [int(line) for line in out.split(b"\n") if line.strip().isdigit()]
    last = reported[-1] if reported else 1
    assert last > 0

    store = recording(LmdbStore(path))
    try:
        qid = store.load_definitions().queues[0].qid
        stats = store.queue_stats(qid)
        assert stats.count >= last  # every confirmed batch is there
        assert stats.count in batch_ends(stats.count)  # and batches are all or nothing
        entries = store.read_queue(qid, 0, 1 << 30)
        assert [e.seq for e in entries] == list(range(stats.count))
        assert all(e.message.body == b"%d" % e.seq * 100 for e in entries)
        assert store._message_count() == stats.count
    finally:
        store.close()


def test_free_pages_count_and_compaction_gives_them_back(path: Path) -> None:
    store = recording(LmdbStore(path))
    qid = store.put_queue(QueueDef("/", "q"))
    keep = store.put_queue(QueueDef("/", "keep"))
    store.enqueue(keep, 0, msg(b"kept"))
    for seq in range(3000):
        store.enqueue(qid, seq, msg(b"x" * 2000))
    commit(store)
    full = store.space()
    assert full.file_bytes >= 3000 * 2000 and full.free_bytes < full.file_bytes // 10
    store.delete_queue("/", "q", qid)
    commit(store)
    while store.reclaiming:  # the queue's entries leave in slices after its delete commits
        store.reclaim()
    emptied = store.space()
    assert emptied.file_bytes >= full.file_bytes  # LMDB never shrinks its file...
    assert emptied.free_bytes > emptied.file_bytes * 0.9  # ...but its pages are free again
    copy = store.compact_copy()
    assert copy.parent == path.parent  # beside the store: the store dir holds LMDB files only
    store.compact_swap(copy)
    assert store.file_bytes() < full.file_bytes // 20
    assert not copy.exists()
    assert [e.message.body for e in store.read_queue(keep, 0, 10)] == [b"kept"]
    store.enqueue(keep, 1, msg(b"after"))  # still writable
    commit(store)
    store.close()
    copy.mkdir()  # as if a compaction had been cut short: removed at the next open
    store = recording(LmdbStore(path))
    assert not copy.exists()
    assert [e.message.body for e in store.read_queue(keep, 0, 10)] == [b"kept", b"after"]
    assert [q.name for q in store.load_definitions().queues] == ["keep"]
    store.close()


def _mapped_kib(path: Path) -> int:
    """Resident KiB of this process's mappings of the store's data file (smaps)."""
    real, total, current = str((path / "data.mdb").resolve()), 0, ""
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:
                current = fields[5] if len(fields) >= 6 else ""
            elif fields[0] == "Rss:" and current == real:
                total += int(fields[1])
    return total


def test_release_memory_unmaps_read_pages_also_after_a_compaction(path: Path) -> None:
    """Pages read through LMDB's map count in RSS until released; the mapping is found once
    per environment, so a compaction (a new environment) must not leave a stale one."""
    store = recording(LmdbStore(path))
    qid = store.put_queue(QueueDef("/", "q"))
    for seq in range(2000):
        store.enqueue(qid, seq, msg(b"x" * 2000))
    commit(store)
    for _ in range(2):
        store.pages.every = 1 << 30  # no release during the read
        assert len(store.read_queue(qid, 0, 1 << 30)) == 2000
        assert _mapped_kib(path) > 2000  # about 4 MB of bodies read through the map
        store.release_memory()
        assert _mapped_kib(path) < 200
        store.compact_swap(store.compact_copy())
    store.close()


@pytest.mark.parametrize("read", ["read_queue", "read_entries", "remove"])
def test_one_long_call_gives_pages_back_as_it_goes(path: Path, read: str) -> None:
    """A deep drain reads and deletes thousands of entries in one call; the store gives the
    mapped pages back every ``pages.every`` entries, so one call cannot grow RSS by the
    size of what it walks (the 10M-message priority drain, docs/benchmarks.md)."""
    store = recording(LmdbStore(path))
    qid = store.put_queue(QueueDef("/", "q"))
    for seq in range(3000):
        store.enqueue(qid, seq, msg(bytes([seq % 256]) * 4000))  # a page each, ~12 MB
    commit(store)
    store.release_memory()
    peaks: list[int] = []
    release = store.release_memory

    def measured_release() -> None:
        peaks.append(_mapped_kib(path))
        release()

    store.store.pages = PageBudget(measured_release, 100)
    if read == "read_queue":
        assert len(store.read_queue(qid, 0, 1 << 30)) == 3000
    elif read == "read_entries":
        assert len(store.read_entries(qid, range(2999, -1, -1))) == 3000
    else:
        for seq in range(3000):
            store.remove(qid, seq)
        commit(store)
        assert seqs(store, qid) == []
    assert len(peaks) >= 29
    assert max(peaks) < 4_000  # about 100 entries' pages and their neighbours, not 12 MB
    assert max(peaks) > 300  # it did map what it read (the measure is not blind)
    store.close()


def test_page_budget_releases_every_so_many_accesses() -> None:
    calls: list[int] = []
    budget = PageBudget(lambda: calls.append(1), 3)
    for _ in range(8):
        budget.spend()
    assert len(calls) == 2
    budget.spend(5)
    assert len(calls) == 3


def test_key_order_reads_of_small_records_spend_a_share_of_a_page(path: Path) -> None:
    """A FIFO queue's records lie side by side, a few to a page: reading them in key order
    spends each one's share of a page. Records of queues that were filled together (a
    priority queue's levels) lie apart: each spends a whole page, as before."""
    store = recording(LmdbStore(path))
    fifo, a, b = (store.put_queue(QueueDef("/", name)) for name in ("fifo", "a", "b"))
    for seq in range(3000):
        store.enqueue(fifo, seq, msg(b"x" * 100))
    for seq in range(3000):  # interleaved in the file: a's ids step by two
        store.enqueue(a, seq, msg(b"y" * 100))
        store.enqueue(b, seq, msg(b"z" * 100))
    commit(store)
    releases: list[int] = []
    store.store.pages = PageBudget(lambda: releases.append(1), 100)
    assert len(store.read_queue(fifo, 0, 1 << 30)) == 3000
    assert len(releases) <= 3  # 3,000 x (100 + 64) B is about 120 pages
    releases.clear()
    assert len(store.read_queue(a, 0, 1 << 30)) == 3000
    assert len(releases) == 30  # a page a record
    releases.clear()
    for seq in range(3000):  # acks in order: the index cursor's page, the records side by side
        store.remove(fifo, seq)
    commit(store)
    assert len(releases) <= 3
    releases.clear()
    for seq in range(0, 3000, 2):
        store.remove(b, seq)
    commit(store)
    assert len(releases) >= 29  # every other entry: a page each for entry and record
    store.close()


def test_version_4_counters_read_as_nothing_delivered_below(path: Path) -> None:
    """Version 4 marked each delivered entry and wrote five-field counters: those open
    with a delivered mark of 0 and their per-entry counts kept; a mark written after the
    upgrade covers the entries under it, and one stays in the queue's counter."""
    store = recording(LmdbStore(path))
    qid = store.put_queue(QueueDef("/", "q"))
    for seq in range(4):
        store.enqueue(qid, seq, msg(b"m%d" % seq))
    commit(store)
    store.mark_delivered(qid, 0, msg(b"m0"), 2)
    commit(store)
    store.close()
    env = lmdb.open(str(path), max_dbs=8)
    with env.begin(write=True) as txn:
        meta = env.open_db(b"meta", txn=txn)
        key = COUNTER_PREFIX + U32.pack(qid)
        assert decode_counter(txn.get(key, db=meta))[5] == 0
        txn.put(key, COUNTER_V3.pack(*decode_counter(txn.get(key, db=meta))[:5]), db=meta)
        txn.put(b"version", U32.pack(4), db=meta)
    env.close()
    store = recording(LmdbStore(path))
    assert [e.delivery_count for e in store.read_queue(qid, 0, 10)] == [2, 0, 0, 0]
    store.mark_delivered_below(qid, 3)
    commit(store)
    assert [e.delivery_count for e in store.read_queue(qid, 0, 10)] == [2, 1, 1, 0]
    assert [e.delivery_count for e in store.read_entries(qid, [1, 3])] == [1, 0]
    store.mark_delivered_below(qid, 2)  # a lower mark (a restarted queue's first) is kept out
    commit(store)
    store.close()
    store = recording(LmdbStore(path))
    assert [e.delivery_count for e in store.read_queue(qid, 0, 10)] == [2, 1, 1, 0]
    assert store.queue_stats(qid) == QueueStats(4, 0, 4, 8)
    store.close()


def _message_pages(path: Path) -> tuple[int, list[int]]:
    """Leaf pages of the messages database of a closed store, and its record ids."""
    env = lmdb.open(str(path), max_dbs=8)
    with env.begin() as txn:
        db = env.open_db(b"messages", txn=txn)
        pages = txn.stat(db)["leaf_pages"]
        ids = [U64.unpack(k)[0] for k, _ in txn.cursor(db=db)]
    env.close()
    return pages, ids


def test_new_records_fill_their_pages(path: Path) -> None:
    """Records whose ids come after those on disk are appended: three 1 KB records a
    4 KiB page, where inserting them one by one leaves two (each full page split in half)."""
    store = recording(LmdbStore(path))
    qid = store.put_queue(QueueDef("/", "q"))
    for batch in range(4):
        for i in range(300):
            store.enqueue(qid, batch * 300 + i, msg(b"x" * 1024))
        commit(store)
    store.close()
    pages, ids = _message_pages(path)
    assert len(ids) == 1200
    assert pages <= 1200 // 3 + 1


def test_records_out_of_append_order_are_all_written(path: Path) -> None:
    """A priority queue's records sort after the plain ones (a higher cluster byte): a
    batch mixing them, and later plain records below a clustered one, are all stored."""
    store = recording(LmdbStore(path))
    plain, prio = store.put_queue(QueueDef("/", "p")), store.put_queue(QueueDef("/", "h"))
    bodies = {}
    for seq, (qid, cluster) in enumerate([(plain, 0), (prio, 3), (plain, 0), (prio, 1),
                                          (plain, 0)]):
        message = msg(f"m{seq}".encode())
        store.enqueue(qid, seq, message, cluster=cluster)
        bodies[message.store_id] = message.body
    commit(store)
    for seq in range(5, 9):  # all below the clustered records already on disk
        message = msg(f"m{seq}".encode())
        store.enqueue(plain, seq, message)
        bodies[message.store_id] = message.body
    commit(store)
    got = {e.message.store_id: e.message.body
           for qid in (plain, prio) for e in store.read_queue(qid, 0, 100)}
    store.close()
    assert got == bodies
    assert sorted(_message_pages(path)[1]) == sorted(bodies)


@pytest.mark.parametrize("removal", ["purge", "truncate", "delete_queue"])
def test_removing_a_deep_queue_holds_nothing_per_message(path: Path, removal: str) -> None:
    """A purge or truncation removes every entry in one transaction, a queue delete in
    slices after it (``lmdb_drops``): lone messages' records go as their entries do, so its memory does not grow with the queue
    (a 10M-entry stream's delete once grew the heap past 700 MiB), and shared messages
    keep their records for the queue that still holds them."""
    store = recording(LmdbStore(path))
    qid, other = store.put_queue(QueueDef("/", "q")), store.put_queue(QueueDef("/", "o"))
    shared = msg(b"shared")
    store.enqueue(qid, 0, shared)
    store.enqueue(other, 0, shared)
    deep = 20_000
    for seq in range(1, deep):
        store.enqueue(qid, seq, msg(b"x" * 100))
    commit(store)
    store.enqueue(qid, deep, msg(b"in the same batch"))
    if removal == "purge":
        store.purge(qid)
    elif removal == "truncate":
        store.truncate(qid, deep + 1)
    else:
        store.delete_queue("/", "q", qid)
    batch = store.take_batch()
    tracemalloc.start()
    try:
        store.write_batch(batch)
        while store.reclaiming:
            store.reclaim()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * deep  # ~60 B a message held in one dict before; 0 now
    assert [e.message.body for e in store.read_queue(other, 0, 10)] == [b"shared"]
    store.close()
    assert _messages(path) == 1
    assert _refs(path) == {}


def test_read_queue_walks_neighbours_and_finds_the_others(path: Path) -> None:
    """A FIFO backlog's messages are read as the message cursor's next records
    (``lmdb_reads``); a message that is not the next one (shared with another queue,
    interleaved with another queue's) is found by lookup, and a removed one is skipped."""
    store = recording(LmdbStore(path))
    a, b = store.put_queue(QueueDef("/", "a")), store.put_queue(QueueDef("/", "b"))
    expected_a: list[bytes] = []
    for seq in range(300):
        body = b"a%d" % seq
        store.enqueue(a, seq, msg(body))
        expected_a.append(body)
        if seq % 3 == 0:  # b's messages interleave with a's ids
            store.enqueue(b, seq, msg(b"b%d" % seq))
        if seq % 7 == 0:  # and some messages are in both queues
            shared = msg(b"s%d" % seq)
            store.enqueue(a, 1000 + seq, shared)
            store.enqueue(b, 1000 + seq, shared)
    commit(store)
    for seq in (5, 6, 200):
        store.remove(a, seq)
        expected_a.remove(b"a%d" % seq)
    commit(store)
    expected_a += [b"s%d" % seq for seq in range(0, 300, 7)]
    read = [e.message.body for e in store.read_queue(a, 0, 1 << 30)]
    assert read == expected_a
    assert [e.message.body for e in store.read_queue(a, 100, 3)] == [b"a100", b"a101", b"a102"]
    assert len(store.read_queue(b, 0, 1 << 30)) == 100 + 43
    store.close()


def test_read_queue_refuses_an_entry_without_its_message(path: Path) -> None:
    store = recording(LmdbStore(path))
    qid = store.put_queue(QueueDef("/", "q"))
    for seq in range(3):
        store.enqueue(qid, seq, msg(b"m%d" % seq))
    commit(store)
    env = store.store._env
    with env.begin(write=True) as txn:  # the middle message's record goes missing
        txn.delete(U64.pack(2), db=store.store._dbs[b"messages"])
    with pytest.raises(StoreError, match=r"corrupt: entry \(\d+, 1\) refers to missing message 2"):
        store.read_queue(qid, 0, 10)
    store.close()
