"""An exchange's deduplication window, kept in the store in the batch of the enqueue.

Theory of operation
-------------------
``basic_publish`` (``publishing.py``) asks the exchange's ``ExchangeDedupe`` two questions
around the enqueue, in the same event-loop turn: before it, ``duplicate`` (is the
message's key in the window, unexpired?); after it, if some queue took the message,
``remember`` (add the key, evicting the oldest beyond ``x-cache-size``). The loop runs one
publish at a time, so no second publisher of the same key can come between the check and
the insert: with confirms, pipelining and many channels, exactly one copy per key is
enqueued (the plugin's separate check and insert let every second duplicate through).

A durable window (a durable exchange, unless ``x-cache-persistence: memory``) records the
key and its evictions through the group commit (``batch.DedupeAppend``: one operation per
window and batch, keyed on disk by the key's place, so new keys are appended and the
evicted ones are a range), so they are written in the same store transaction as the
enqueue they admitted: after ``kill -9`` the store holds the message and its key, or
neither. ``load`` rebuilds the window, in its FIFO order, at start.

A duplicate is confirmed with ``basic.ack`` (as the stream protocol does for a publishing
id it has seen), never nacked: the publisher retrying after a lost confirm is who dedupe is
for. If the first copy's write is still pending, the duplicate's confirm waits for the same
commit (``Published.held``), so it never gets ahead of the copy it stands for. If that write
fails, the first copy is nacked and its key taken out of the window (``_on_commit``), so the
retry is admitted.

A message refused by every queue (``reject-publish``) leaves no key: its retry may succeed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

from leveret.model.dedupe import (
    TTL_HEADER,
    DedupeSettings,
    HeaderReader,
    Window,
    message_ttl,
)
from leveret.model.message import Message
from leveret.persistence.records import dedupe_scope
from leveret.queues.ttl import Timekeeping, now_ms

__all__ = ["DedupeLog", "ExchangeDedupe"]


class DedupeLog(Protocol):
    """The group commit, as a deduplication window records through it."""

    @property
    def batch(self) -> int: ...

    @property
    def deferred(self) -> bool: ...

    def append_dedupe(self, scope: bytes, order: int, key: bytes, expires_at: int,
                      floor: int) -> None: ...

    def drop_dedupe(self, scope: bytes) -> None: ...

    def after_commit(self, callback: Callable[[bool], None]) -> None: ...


class DedupeStore(Protocol):
    def load_dedupe(self, scope: bytes) -> list[tuple[bytes, int, int]]: ...


class ExchangeDedupe:
    """One exchange's window, its counters, and (if durable) its records."""

    __slots__ = ("_batches", "_headers", "_log", "_order", "_time", "duplicates", "scope",
                 "settings", "window")

    def __init__(self, settings: DedupeSettings, vhost: str, exchange: str, log: DedupeLog,
                 time: Timekeeping) -> None:
        self.settings = settings
        self.window = Window(settings.size)
        self.scope = dedupe_scope(vhost, exchange)
        self._headers = HeaderReader(settings.header, TTL_HEADER)
        self.duplicates = 0  # publishes confirmed without being enqueued
        self._log = log
        self._time = time
        self._order = 0  # the next key's place in the window (its FIFO order on disk)
        # Keys added per batch not yet committed, oldest batch first: (batch, keys).
        self._batches: deque[tuple[int, list[bytes]]] = deque()

    def load(self, store: DedupeStore) -> None:
        """A recovered durable window: its committed keys, oldest first. A size lowered since
        (a redeclare cannot change it, a new definition can) evicts the oldest now."""
        stored = store.load_dedupe(self.scope)
        self.window = Window(self.settings.size, stored)
        if stored:
            self._order = stored[-1][1] + 1
        self.window.resize(self.settings.size)  # the store follows at the next key's floor

    @property
    def pending(self) -> bool:
        """Keys added since the last commit: a duplicate's confirm waits for the next one."""
        return bool(self._batches)

    def read(self, message: Message) -> tuple[bytes | None, object]:
        """The message's key (None: not deduplicated) and its ``x-cache-ttl`` header."""
        return self._headers.read(message)

    def now(self) -> int:
        """Wall-clock ms, the window's time (read once per publish)."""
        return now_ms(self._time)

    def duplicate(self, key: bytes, now: int) -> bool:
        if self.window.seen(key, now):
            self.duplicates += 1
            return True
        return False

    def remember(self, key: bytes, ttl_header: object, now: int) -> None:
        """Some queue took the message carrying ``key``: the window holds it from ``now``
        until its ``x-cache-ttl`` header's TTL, or the exchange's, is over."""
        ttl = self.settings.ttl if ttl_header is None else message_ttl(ttl_header,
                                                                       self.settings.ttl)
        expires = now + ttl if ttl is not None else 0
        order = self._order
        self._order = order + 1
        window = self.window
        window.add(key, order, expires)
        log = self._log
        if self.settings.persistent:
            log.append_dedupe(self.scope, order, key, expires, window.floor(order))
        if log.deferred:
            self._track(key)

    def drop(self) -> None:
        """The exchange was deleted: its window goes from the store too."""
        if self.settings.persistent:
            self._log.drop_dedupe(self.scope)

    # -- failed writes ------------------------------------------------------------------

    def _track(self, key: bytes) -> None:
        batch = self._log.batch
        batches = self._batches
        if batches and batches[-1][0] == batch:
            batches[-1][1].append(key)
            return
        batches.append((batch, [key]))
        self._log.after_commit(self._on_commit)

    def _on_commit(self, ok: bool) -> None:
        _, keys = self._batches.popleft()
        if not ok:  # their copies were nacked and forgotten: let the retries in
            for key in keys:
                self.window.discard(key)
