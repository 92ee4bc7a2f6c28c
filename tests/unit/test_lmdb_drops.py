"""A deleted queue's entries written off in slices (``persistence/lmdb_drops.py``): gone
for every read from the commit that deletes it, removed a bounded slice per transaction,
and finished by a reopened store after a crash part-way."""

from __future__ import annotations

from pathlib import Path

import pytest

from leveret.model.message import Message
from leveret.persistence.group_commit import GroupCommit
from leveret.persistence.lmdb_store import LmdbStore
from leveret.persistence.store import QueueDef, QueueStats
from leveret.queues.queue import Queue

from .queue_fakes import FakeClock, FakeVhost
from .queue_fakes import msg as persistent
from .store_harness import recording

PROPS = b"\x10\x00\x02"
SLICE = 100


def msg(body: bytes) -> Message:
    return Message("", "q", PROPS, body)


def commit(store) -> None:
    store.write_batch(store.take_batch())


def test_a_deleted_queue_goes_at_once_and_its_entries_slice_by_slice(tmp_path: Path) -> None:
    store = recording(LmdbStore(tmp_path / "s", delete_slice=SLICE))
    deep, other = store.put_queue(QueueDef("/", "deep")), store.put_queue(QueueDef("/", "o"))
    shared = msg(b"shared")
    store.enqueue(other, 0, shared)
    store.enqueue(deep, 0, shared)
    for seq in range(1, 450):
        store.enqueue(deep, seq, msg(b"%d" % seq), transient=seq % 7 == 0)
    commit(store)
    assert store._entry_count() == 451

    store.delete_queue("/", "deep", deep)
    commit(store)
    # Gone for every read at once; a same-named queue is a new one, empty.
    assert [q.name for q in store.load_definitions().queues] == ["o"]
    assert store.queue_stats(deep) == QueueStats(0, 0, 0)
    again = store.put_queue(QueueDef("/", "deep"))
    commit(store)
    assert again != deep and store.read_queue(again, 0, 10) == []
    # ...while its entries wait for their slices, the first carried by that next commit
    assert store._entry_count() == 451 - SLICE

    assert store.reclaiming
    store.reclaim()
    store.reclaim()
    assert store._entry_count() == 451 - 3 * SLICE  # one bounded slice per transaction
    store.close()  # a crash between slices: committed state only

    store = recording(LmdbStore(tmp_path / "s", delete_slice=SLICE))
    assert store.reclaiming  # the reopened store finds the marker and goes on
    left = 450 - 3 * SLICE - len([s for s in range(3 * SLICE, 450) if s % 7 == 0])
    assert store._entry_count() == 1 + left  # its transient entries went at the start
    store.enqueue(other, 1, msg(b"a batch carries a slice"))
    commit(store)
    assert store._entry_count() == 2 + left - SLICE
    while store.reclaiming:
        store.reclaim()
    assert store._entry_count() == 2  # the other queue's two
    assert store._message_count() == 2  # the shared message kept its record
    assert [e.message.body for e in store.read_queue(other, 0, 10)] == [
        b"shared", b"a batch carries a slice"]
    assert store.queue_stats(other).count == 2
    assert store.queue_stats(deep) == QueueStats(0, 0, 0)  # no counter came back
    store.close()
    store = recording(LmdbStore(tmp_path / "s", delete_slice=SLICE))
    assert not store.reclaiming and store._entry_count() == 2
    store.close()


@pytest.mark.parametrize("arguments", [{}, {"x-max-priority": 5}])
def test_a_deleted_queues_purge_records_nothing(tmp_path: Path, arguments: dict) -> None:
    # VirtualHost.delete_queue marks the queue deleted, purges it, then records the delete:
    # the purge's removals would all go in the deleting commit, which must stay short.
    vhost = FakeVhost(FakeClock())
    vhost.log = GroupCommit(LmdbStore(tmp_path / "s"))  # no loop: each record is a commit
    q = Queue(vhost, "q", durable=True, arguments=arguments)
    q.qid = vhost.log.put_queue(QueueDef("/", "q", True, False, arguments))
    q.log = vhost.log
    for i in range(50):
        q.publish(persistent(b"%d" % i, persistent=True))
    store = vhost.log.store
    assert store._entry_count() == 50
    q.deleted = True
    assert q.purge() == 50
    vhost.log.delete_queue("/", "q", q.qid)
    assert store._entry_count() == 50 and store.reclaiming  # left for the slices
    while store.reclaiming:
        store.reclaim()
    assert store._entry_count() == 0 and store._message_count() == 0
    store.close()
