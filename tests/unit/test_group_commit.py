"""Group commit: confirms are released only after the store write returns, and a failed
write turns every confirm of its batch into a nack."""

import asyncio
import threading

import pytest

from leveret.model.message import Message
from leveret.persistence.group_commit import GroupCommit
from leveret.persistence.memory import MemoryStore
from leveret.persistence.store import StoreError


class FailingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.fail = False
        self.writes = 0

    def write_batch(self, batch):
        self.writes += 1
        if self.fail:
            raise StoreError("disk full (simulated)")
        super().write_batch(batch)


class FakeChannel:
    def __init__(self) -> None:
        self.settled: list[tuple[int, bool]] = []

    def confirms_settled(self, seqs: list[int], ok: bool) -> None:
        self.settled.extend((seq, ok) for seq in seqs)


def message(n: int) -> Message:
    return Message("", "q", b"\x10\x00\x02", b"body-%d" % n)  # delivery_mode=2


async def test_confirms_wait_for_the_commit_and_batches_group():
    store = FailingStore()
    log = GroupCommit(store, asyncio.get_running_loop())
    ch = FakeChannel()
    for seq in range(1, 101):
        log.enqueue(1, seq, message(seq))
        log.hold(ch, seq)
    assert ch.settled == []  # nothing is confirmed before the write returns
    await log.drain()
    assert ch.settled == [(seq, True) for seq in range(1, 101)]
    assert store.writes == 1  # one turn of the loop, one batch, one sync
    assert [e.seq for e in store.read_queue(1, 0, 1000)] == list(range(1, 101))
    log.close()


async def test_failed_write_nacks_its_batch_and_the_next_batch_still_works():
    store = FailingStore()
    log = GroupCommit(store, asyncio.get_running_loop())
    ch = FakeChannel()
    store.fail = True
    log.enqueue(1, 1, message(1))
    log.hold(ch, 1)
    results: list[bool] = []
    log.after_commit(results.append)
    await log.drain()
    assert ch.settled == [(1, False)]
    assert results == [False]
    assert store.read_queue(1, 0, 10) == []
    store.fail = False
    log.enqueue(1, 2, message(2))
    log.hold(ch, 2)
    await log.drain()
    assert ch.settled[-1] == (2, True)
    assert [e.seq for e in store.read_queue(1, 0, 10)] == [2]
    log.close()


def test_without_a_loop_writes_are_synchronous_and_nothing_is_held():
    store = FailingStore()
    log = GroupCommit(store)
    assert not log.deferred
    log.enqueue(1, 1, message(1))
    assert store.writes == 1 and len(store.read_queue(1, 0, 10)) == 1
    seen: list[bool] = []
    log.after_commit(seen.append)
    assert seen == [True]


@pytest.mark.parametrize("n", [3])
async def test_records_during_a_write_form_the_next_batch(n):
    store = FailingStore()
    loop = asyncio.get_running_loop()
    log = GroupCommit(store, loop)
    ch = FakeChannel()
    for round_ in range(n):
        log.enqueue(1, round_, message(round_))
        log.hold(ch, round_)
        await asyncio.sleep(0)  # let the flush start; the next record lands in a new batch
    await log.drain()
    assert sorted(ch.settled) == [(r, True) for r in range(n)]
    assert 1 <= store.writes <= n
    log.close()


class SlowStore(FailingStore):
    """A store whose first write waits until the test lets it go, so operations pile up
    behind the writer (however slow the machine: no sleep decides what is in flight)."""

    def __init__(self) -> None:
        super().__init__()
        self.writing = threading.Event()
        self.go = threading.Event()

    def write_batch(self, batch):
        self.writing.set()
        assert self.go.wait(60), "the test never let the write finish"
        super().write_batch(batch)


async def test_backlogged_while_too_much_waits_for_the_writer(monkeypatch):
    from leveret.persistence import group_commit

    monkeypatch.setattr(group_commit, "MAX_PENDING", 10)
    store = SlowStore()
    log = GroupCommit(store, asyncio.get_running_loop())
    log.enqueue(1, 0, message(0))
    assert await asyncio.to_thread(store.writing.wait, 60)  # the first batch is being written
    assert not log.backlogged
    for seq in range(1, 12):
        log.enqueue(1, seq, message(seq))
    assert log.backlogged  # 11 recorded while a write is in flight
    resumed = asyncio.Event()
    log.when_caught_up(resumed.set)
    store.go.set()
    await asyncio.wait_for(resumed.wait(), 60)
    assert not log.backlogged  # the backlog became the next batch
    await log.drain()
    assert len(store.read_queue(1, 0, 100)) == 12
    log.close()


async def test_compaction_runs_between_batches_and_recording_goes_on(tmp_path):
    from leveret.persistence.lmdb_store import LmdbStore

    store = LmdbStore(tmp_path / "store")
    log = GroupCommit(store, asyncio.get_running_loop())
    for seq in range(2000):
        log.enqueue(1, seq, message(seq))
    await log.drain()
    log.purge(1)
    await log.drain()
    compaction = asyncio.ensure_future(log.compact())
    ch = FakeChannel()
    log.enqueue(1, 5000, message(5000))  # recorded while the copy is made
    log.hold(ch, 1)
    before, after = await compaction
    assert after < before
    await log.drain()
    assert ch.settled == [(1, True)]
    assert [e.seq for e in store.read_queue(1, 0, 10)] == [5000]
    log.close()
