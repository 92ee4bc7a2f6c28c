"""Group commit: the broker's single door to the store.

Theory of operation
-------------------
Queues, the vhost and channels record what must become durable through this
object: it *is* the recorder of the pending batch (``batch.Recorder``: ops,
folding, ids), plus the writer that takes batches and hands them to the
store. Recorders say who is waiting for durability: a confirm held for a
publisher (``hold``), or any callback (``after_commit``, e.g. a definition's
"-ok" or a control-socket reply; ``committed`` awaits it, as an HTTP write's
answer does). Recording schedules a flush for the end of the current
event-loop turn. The flush detaches the batch and writes it on a dedicated
thread (LMDB releases the GIL while it writes and fsyncs), so the loop keeps
serving clients; everything recorded meanwhile forms the next batch, started
as soon as the previous one returns. Batch sizes thus follow the load: one
message when idle, thousands under pressure, one fsync each.

Only after ``write_batch`` returns are the waiters released, with ``ok`` true
(confirm = ``basic.ack``) or false (the write failed: ``basic.nack``).

Backpressure: while a write is in flight, at most ``MAX_PENDING`` operations
may pile up for the next batch; beyond that ``backlogged`` is true and the
server stops reading its clients until the write returns (``when_caught_up``).
That keeps each write transaction, and the memory it takes, bounded when the
disk is slower than the clients.

While no batch waits, the writer removes deleted queues' entries a slice at a time
(``store.reclaim``, ``lmdb_drops``); a batch recorded meanwhile waits for one slice at
most.

``compact`` (``leveret ctl compact``) takes the writer's turn between two
batches: it copies the store on the writer thread, swaps it in on the loop
thread, and recording goes on meanwhile as during any write. ``on_commit`` runs
after each successful commit (the server's disk-space check).

Without an event loop (unit tests of the sans-IO core, in-memory store) the
batch is written synchronously as it is recorded, and nothing is ever held.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from leveret.persistence.batch import Batch, Recorder
from leveret.persistence.commit_stats import BATCH_BOUNDS, WRITE_BOUNDS, Histogram
from leveret.persistence.store import QueueStats, Store, StoredEntry, StoreError

log = logging.getLogger(__name__)

Waiter = Callable[[bool], None]

# Operations recorded for the next batch while one is being written, before clients wait.
MAX_PENDING = 50_000


class ConfirmSink(Protocol):
    """Whoever waits for a publisher confirm that a commit releases (an AMQP channel)."""

    def confirms_settled(self, seqs: list[int], ok: bool) -> None:
        """Held confirms ``seqs`` (ascending) were committed (``ok``) or lost."""


class GroupCommit(Recorder):
    def __init__(self, store: Store, loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(store.state())
        self.store = store
        self.loop = loop
        self.deferred = loop is not None  # confirms wait for a later commit
        self._executor = (concurrent.futures.ThreadPoolExecutor(1, "leveret-commit")
                          if loop is not None else None)
        self._callbacks: list[Waiter] = []
        self._idle: asyncio.Future[None] | None = None
        self.commits = 0
        self.failures = 0
        # Per batch, for Prometheus (commit_stats.py): operations, and write+fsync seconds.
        self.batch_sizes = Histogram(BATCH_BOUNDS)
        self.write_seconds = Histogram(WRITE_BOUNDS)
        self._caught_up: list[Callable[[], None]] = []
        # Called on the loop thread after each successful commit (the disk-space check).
        self.on_commit: Callable[[], None] | None = None
        # An exclusive job (compaction) waiting for its turn between two batches.
        self._turn: asyncio.Future[None] | None = None
        self._compacting = False
        self._closed = False
        if loop is not None and store.reclaiming:  # queues deleted before a restart
            loop.call_soon(self._start)

    def _wanted(self) -> None:
        """Operations wait (``Recorder._recorded``): write them now, or schedule a write for
        this loop turn."""
        if not self.deferred:
            self._write_now()
        else:
            self._scheduled = True
            assert self.loop is not None
            self.loop.call_soon(self._start)

    def read_queue(self, qid: int, from_seq: int, limit: int) -> list[StoredEntry]:
        """Committed entries (queues page their tails back through here)."""
        return self.store.read_queue(qid, from_seq, limit)

    def read_entries(self, qid: int, seqs: Sequence[int]) -> list[StoredEntry]:
        """Committed entries by sequence number (a priority queue's paged tails)."""
        return self.store.read_entries(qid, seqs)

    def read_stamps(self, qid: int, from_seq: int, limit: int) -> list[tuple[int, int, int]]:
        """Committed entries' (seq, expires_at, body bytes), no message read (a stream's
        recovery)."""
        return self.store.read_stamps(qid, from_seq, limit)

    def queue_stats(self, qid: int) -> QueueStats:
        """Committed counts and byte totals of a queue's entries (the management plane's
        persistent messages and bytes)."""
        return self.store.queue_stats(qid)

    # -- waiting for durability ---------------------------------------------------

    def after_commit(self, callback: Waiter) -> None:
        """Run ``callback(ok)`` once everything recorded so far is committed (or failed)."""
        if not self.deferred:
            callback(True)
            return
        self._callbacks.append(callback)
        if not self._scheduled and not self._writing:
            self._scheduled = True
            assert self.loop is not None
            self.loop.call_soon(self._start)

    async def committed(self) -> bool:
        """Wait until everything recorded so far is committed: true, or false if the write
        failed. At once when nothing is pending or being written (an answer that changed
        nothing durable costs no sync)."""
        if not self.deferred or not self.busy:
            return True
        assert self.loop is not None
        done: asyncio.Future[bool] = self.loop.create_future()

        def settle(ok: bool) -> None:
            if not done.done():
                done.set_result(ok)

        self.after_commit(settle)
        return await done

    @property
    def backlogged(self) -> bool:
        """Too much is waiting for the writer: clients should pause."""
        return self.waiting_over(MAX_PENDING)

    def waiting_over(self, limit: int) -> bool:
        """A write is in flight and more than ``limit`` operations wait behind it."""
        return self._writing and self._recorded_ops > limit

    def when_caught_up(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the write in flight returns (the backlog becomes its batch)."""
        if not self._writing:
            callback()
        else:
            self._caught_up.append(callback)

    @property
    def busy(self) -> bool:
        return self._writing or self._scheduled or self.has_pending()

    # -- the write cycle ------------------------------------------------------------

    def _timed_write(self, batch: Batch) -> float:
        """Write ``batch`` (on the writer thread); returns the seconds it took."""
        start = time.perf_counter()
        self.store.write_batch(batch)
        return time.perf_counter() - start

    def _write_now(self) -> None:
        ok = True
        ops, self._recorded_ops = self._recorded_ops, 0
        try:
            seconds = self._timed_write(self._take())
        except StoreError as exc:
            log.error("store write failed: %s", exc)
            ok = False
        else:
            self.batch_sizes.observe(ops)
            self.write_seconds.observe(seconds)
            if self.on_commit is not None:
                self.on_commit()
        self._release(self._held, self._callbacks, ok)
        self._held, self._callbacks = {}, []

    def _start(self) -> None:
        self._scheduled = False
        if self._writing:
            return
        if self._turn is not None:  # an exclusive job runs between this batch and the next
            turn, self._turn = self._turn, None
            self._writing = True
            turn.set_result(None)
            return
        if not self.has_pending() and not self._held and not self._callbacks:
            if (self.store.reclaiming and not self._closed
                    and (self._idle is None or self._idle.done())):
                self._reclaim()  # not while someone drains: shutdown waits for batches only
                return
            self._set_idle()
            return
        batch = self._take()
        ops, self._recorded_ops = self._recorded_ops, 0
        held, self._held = self._held, {}
        callbacks, self._callbacks = self._callbacks, []
        self._writing = True
        assert self.loop is not None and self._executor is not None
        future = self.loop.run_in_executor(self._executor, self._timed_write, batch)
        future.add_done_callback(lambda f: self._done(f, held, callbacks, ops))

    def _done(self, future: asyncio.Future[float], held: dict[ConfirmSink, list[int]],
              callbacks: list[Waiter], ops: int = 0) -> None:
        self._writing = False
        exc = future.exception()
        ok = exc is None
        confirms = sum(map(len, held.values()))
        if ok:
            self.commits += 1
            self.batch_sizes.observe(ops)
            self.write_seconds.observe(future.result())
            # One line per synced write; `leveret lab run fsync` counts these (no metrics yet).
            log.debug("group commit %d: %d confirm(s) released by one synced write",
                      self.commits, confirms)
            if self.on_commit is not None:
                self.on_commit()
        else:
            self.failures += 1
            log.error("store write failed; %d confirm(s) become nacks: %s", confirms, exc)
        self._release(held, callbacks, ok)
        self._start()
        self._resume_clients()

    def _reclaim(self) -> None:
        """The writer is free: one slice of a deleted queue's entries (``lmdb_drops``),
        then the next batch or slice."""
        self._writing = True
        assert self.loop is not None and self._executor is not None
        future = self.loop.run_in_executor(self._executor, self.store.reclaim)
        future.add_done_callback(self._reclaimed)

    def _reclaimed(self, future: asyncio.Future[None]) -> None:
        self._writing = False
        exc = future.exception()
        if exc is not None:
            log.error("%s", exc)
        self._start()
        self._resume_clients()

    def _resume_clients(self) -> None:
        if self._caught_up:
            waiting, self._caught_up = self._caught_up, []
            for callback in waiting:
                callback()

    async def compact(self) -> tuple[int, int]:
        """Rewrite the store without its free pages, between two batches; returns the
        file size before and after. Meanwhile operations are recorded for the next
        batch as during any write (clients pause if too many pile up)."""
        if self._compacting:
            raise StoreError("a compaction is already running")
        self._compacting = True
        try:
            if self.loop is None:
                before = self.store.file_bytes()
                copy = self.store.compact_copy()
                if copy is not None:
                    self.store.compact_swap(copy)
                return before, self.store.file_bytes()
            if self._writing or self._scheduled:
                self._turn = self.loop.create_future()
                await self._turn  # _start handed us the writer (self._writing is set)
            else:
                self._writing = True
            try:
                before = self.store.file_bytes()
                copy = await self.loop.run_in_executor(self._executor, self.store.compact_copy)
                if copy is not None:
                    self.store.compact_swap(copy)  # loop thread: no read is open
                return before, self.store.file_bytes()
            finally:
                self._writing = False
                self._start()
                self._resume_clients()
        finally:
            self._compacting = False

    @staticmethod
    def _release(held: dict[ConfirmSink, list[int]], callbacks: list[Waiter], ok: bool) -> None:
        for channel, seqs in held.items():
            channel.confirms_settled(seqs, ok)
        for callback in callbacks:
            try:
                callback(ok)
            except Exception:  # one waiter's bug must not strand the others
                log.exception("commit callback failed")

    def _set_idle(self) -> None:
        if self._idle is not None and not self._idle.done():
            self._idle.set_result(None)

    async def drain(self) -> None:
        """Wait until everything recorded so far is written (shutdown)."""
        while self.busy and self.loop is not None:
            self._idle = self.loop.create_future()
            if not self._scheduled and not self._writing:
                self._start()
            await asyncio.wait_for(asyncio.shield(self._idle), timeout=30)

    def release_memory(self) -> None:
        """Let the store give back cached memory (LMDB: mapped pages of its file)."""
        release = getattr(self.store, "release_memory", None)
        if release is not None:
            release()

    def close(self) -> None:
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self.store.close()

    def _take(self) -> Batch:
        """Detach the pending batch for writing; later records start the next one."""
        self.batch += 1
        return self.take_batch()
