"""Group commit: the broker's single door to the store.

Theory of operation
-------------------
Queues, the vhost and channels record what must become durable through this
object (it forwards to the store's pending batch) and say who is waiting for
it: a confirm held for a publisher (``hold``) or any callback
(``after_commit``). Recording schedules a flush for the end of the current
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

Without an event loop (unit tests of the sans-IO core, in-memory store) the
batch is written synchronously as it is recorded, and nothing is ever held.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from typing import Any

from leveret.persistence.store import (
    AccessDef,
    BindingDef,
    Definitions,
    ExchangeDef,
    PolicyDef,
    QueueDef,
    QueueStats,
    Store,
    StoredEntry,
    StoreError,
)
from leveret.model.message import Message

log = logging.getLogger(__name__)

Waiter = Callable[[bool], None]

# Operations recorded for the next batch while one is being written, before clients wait.
MAX_PENDING = 50_000


class GroupCommit:
    def __init__(self, store: Store, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.store = store
        self.loop = loop
        self.deferred = loop is not None  # confirms wait for a later commit
        self._executor = (concurrent.futures.ThreadPoolExecutor(1, "leveret-commit")
                          if loop is not None else None)
        self._scheduled = False
        self._writing = False
        self._held: list[tuple[Any, int]] = []  # (channel, confirm seq)
        self._callbacks: list[Waiter] = []
        self._idle: asyncio.Future[None] | None = None
        self.commits = 0
        self.failures = 0
        # Number of the batch being recorded: what is recorded now is released (its
        # after_commit callbacks run) together, with the same ``ok``.
        self.batch = 0
        self._recorded = 0  # operations recorded since the last batch was taken
        self._caught_up: list[Callable[[], None]] = []

    # -- recording (forwarded to the store's pending batch) ---------------------

    def _dirty(self) -> None:
        self._recorded += 1
        if not self.deferred:
            self._write_now()
        elif not self._scheduled and not self._writing:
            self._scheduled = True
            assert self.loop is not None
            self.loop.call_soon(self._start)

    def enqueue(self, qid: int, seq: int, message: Message, transient: bool = False,
                expires_at: int = 0) -> None:
        self.store.enqueue(qid, seq, message, transient, expires_at)
        self._dirty()

    def mark_delivered(self, qid: int, seq: int, message: Message, count: int) -> None:
        self.store.mark_delivered(qid, seq, message, count)
        self._dirty()

    def remove(self, qid: int, seq: int, message: Message) -> None:
        self.store.remove(qid, seq, message)
        self._dirty()

    def purge(self, qid: int, from_seq: int = 0) -> None:
        """Remove the queue's stored entries with seq >= from_seq (its paged-out tail)."""
        self.store.purge(qid, from_seq)
        self._dirty()

    def put_exchange(self, exchange: ExchangeDef) -> None:
        self.store.put_exchange(exchange)
        self._dirty()

    def delete_exchange(self, vhost: str, name: str) -> None:
        self.store.delete_exchange(vhost, name)
        self._dirty()

    def put_queue(self, queue: QueueDef) -> int:
        qid = self.store.put_queue(queue)
        self._dirty()
        return qid

    def delete_queue(self, vhost: str, name: str, qid: int) -> None:
        self.store.delete_queue(vhost, name, qid)
        self._dirty()

    def put_binding(self, binding: BindingDef) -> None:
        self.store.put_binding(binding)
        self._dirty()

    def delete_binding(self, binding: BindingDef) -> None:
        self.store.delete_binding(binding)
        self._dirty()

    def put_policy(self, policy: PolicyDef) -> None:
        self.store.put_policy(policy)
        self._dirty()

    def delete_policy(self, vhost: str, name: str) -> None:
        self.store.delete_policy(vhost, name)
        self._dirty()

    def put_access(self, access: AccessDef) -> None:
        self.store.put_access(access)
        self._dirty()

    def delete_access(self, kind: str, key: tuple[str, ...]) -> None:
        self.store.delete_access(kind, key)
        self._dirty()

    # -- reads ------------------------------------------------------------------

    def load_definitions(self) -> Definitions:
        return self.store.load_definitions()

    def queue_stats(self, qid: int) -> QueueStats:
        return self.store.queue_stats(qid)

    def read_queue(self, qid: int, from_seq: int, limit: int) -> list[StoredEntry]:
        return self.store.read_queue(qid, from_seq, limit)

    # -- waiting for durability ---------------------------------------------------

    def hold(self, channel: Any, seq: int) -> None:
        """Release publisher confirm ``seq`` of ``channel`` after the next commit."""
        self._held.append((channel, seq))

    def after_commit(self, callback: Waiter) -> None:
        """Run ``callback(ok)`` once everything recorded so far is committed (or failed)."""
        if not self.deferred:
            callback(True)
            return
        self._callbacks.append(callback)
        self._dirty()

    @property
    def backlogged(self) -> bool:
        """Too much is waiting for the writer: clients should pause."""
        return self._writing and self._recorded > MAX_PENDING

    def when_caught_up(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the write in flight returns (the backlog becomes its batch)."""
        if not self._writing:
            callback()
        else:
            self._caught_up.append(callback)

    @property
    def busy(self) -> bool:
        return self._writing or self._scheduled or self.store.has_pending()

    # -- the write cycle ------------------------------------------------------------

    def _write_now(self) -> None:
        ok = True
        self.batch += 1
        try:
            self.store.write_batch(self.store.take_batch())
        except StoreError as exc:
            log.error("store write failed: %s", exc)
            ok = False
        self._release(self._held, self._callbacks, ok)
        self._held, self._callbacks = [], []

    def _start(self) -> None:
        self._scheduled = False
        if self._writing:
            return
        if not self.store.has_pending() and not self._held and not self._callbacks:
            self._set_idle()
            return
        batch = self.store.take_batch()
        self.batch += 1
        self._recorded = 0
        held, self._held = self._held, []
        callbacks, self._callbacks = self._callbacks, []
        self._writing = True
        assert self.loop is not None and self._executor is not None
        future = self.loop.run_in_executor(self._executor, self.store.write_batch, batch)
        future.add_done_callback(lambda f: self._done(f, held, callbacks))

    def _done(self, future: asyncio.Future[None], held: list[tuple[Any, int]],
              callbacks: list[Waiter]) -> None:
        self._writing = False
        exc = future.exception()
        ok = exc is None
        if ok:
            self.commits += 1
            # One line per synced write; `leveret lab run fsync` counts these (no metrics yet).
            log.debug("group commit %d: %d confirm(s) released by one synced write",
                      self.commits, len(held))
        else:
            self.failures += 1
            log.error("store write failed; %d confirm(s) become nacks: %s", len(held), exc)
        self._release(held, callbacks, ok)
        self._start()
        if self._caught_up:
            waiting, self._caught_up = self._caught_up, []
            for callback in waiting:
                callback()

    @staticmethod
    def _release(held: list[tuple[Any, int]], callbacks: list[Waiter], ok: bool) -> None:
        for channel, seq in held:
            channel.confirm_settled(seq, ok)
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
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self.store.close()
