"""An exchange's deduplication window, kept in the store in the batch of the enqueue.

Theory of operation
-------------------
``basic_publish`` (``publishing.py``) asks the exchange's ``ExchangeDedupe`` three things,
in the same event-loop turn: before routing, ``expect`` (the message's key, whose table slot
the window fetches while the message is routed); before the enqueue, ``check_key`` (the
key, unless the window holds it unexpired: then it is a duplicate); after it, if some queue
took the message, ``admit`` (add the key, evicting the oldest beyond ``x-cache-size``).
``check`` is the first two in one, for the paths that do not route. One call each: a
publish is the window's hot path. The loop runs one publish at a time, so no second
publisher of the same key can come between the check and the insert: with confirms,
pipelining and many channels, exactly one copy per key is enqueued (the plugin's separate
check and insert let every second duplicate through).

A durable window (a durable exchange, unless ``x-cache-persistence: memory``) records the
key and its evictions through the group commit (``batch.DedupeAppend``: one operation per
window and batch, written as runs of keys keyed by their places, so new keys are appended
and the evicted ones are whole runs behind a floor: ``records.py``), in the same store
transaction as the enqueue they admitted: after ``kill -9`` the store holds the message
and its key, or neither. ``load`` rebuilds the window, in its FIFO order, at start. The
first key of a batch opens the window's record in it (``Recorder.dedupe_op``); the later
ones are appended to that record directly (its list of keys is also the one taken back if
the write fails), so a publish costs two list appends, not a call; the record's floor is
the window's when the batch is taken.

A policy's ``x-cache-size``, ``x-cache-ttl`` and ``x-cache-persistence`` fill in what the
exchange's arguments leave unset (``exchange_settings``) and apply at once
(``reconfigure``).

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
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from leveret.model.dedupe import (
    TTL_HEADER,
    DedupeSettings,
    HeaderReader,
    message_ttl,
    settings_for_exchange,
)
from leveret.model.dedupe_window import Window
from leveret.model.message import Message
from leveret.persistence.batch import DedupeAppend
from leveret.persistence.records import dedupe_scope
from leveret.queues.policy import Policy, dedupe_keys
from leveret.queues.ttl import Timekeeping, now_ms

__all__ = ["SEEN", "DedupeLog", "ExchangeDedupe", "exchange_settings"]

# ``ExchangeDedupe.check``'s answer for a duplicate: typed keys are never empty.
SEEN = b""


def exchange_settings(type_: str, arguments: Mapping[str, Any], durable: bool,
                      policy: Policy | None) -> DedupeSettings | None:
    """An exchange's window as its arguments and its policy's window keys make it (the
    argument wins); 406 for a bad argument, judged on the arguments alone as the plugin's
    ``validate`` does at declare."""
    settings = settings_for_exchange(type_, arguments, durable)
    keys = dedupe_keys(policy)
    if settings is None or not keys:
        return settings
    return settings_for_exchange(type_, arguments, durable, keys)


class DedupeLog(Protocol):
    """The group commit, as a deduplication window records through it."""

    @property
    def batch(self) -> int: ...

    @property
    def deferred(self) -> bool: ...

    def append_dedupe(self, scope: bytes, order: int, key: bytes, expires_at: int,
                      floor: int) -> None: ...

    def dedupe_op(self, scope: bytes, order: int) -> DedupeAppend: ...

    def drop_dedupe(self, scope: bytes) -> None: ...

    def after_commit(self, callback: Callable[[bool], None]) -> None: ...


class DedupeStore(Protocol):
    def load_dedupe(self, scope: bytes) -> list[tuple[bytes, int, int]]: ...


class ExchangeDedupe:
    """One exchange's window, its counters, and (if durable) its records."""

    __slots__ = ("_batch", "_batches", "_expires", "_expiries", "_keys", "_log", "_op",
                 "_order", "_time", "_ttl", "_ttl_header", "duplicates", "reader", "scope",
                 "settings", "window")

    def __init__(self, settings: DedupeSettings, vhost: str, exchange: str, log: DedupeLog,
                 time: Timekeeping) -> None:
        self.settings = settings
        self.window = Window(settings.size)
        self.scope = dedupe_scope(vhost, exchange)
        # Reads the message's key (None: not deduplicated) and its ``x-cache-ttl`` header.
        self.reader = HeaderReader(settings.header, TTL_HEADER)
        self._ttl = settings.ttl
        self._expires = 0  # the expiry of the key ``check`` last found new (0: never)
        self._ttl_header: object = None  # the ``x-cache-ttl`` header ``expect`` last read
        self.duplicates = 0  # publishes confirmed without being enqueued
        self._log = log
        self._time = time
        self._order = 0  # the next key's place in the window (its FIFO order on disk)
        # Keys added per batch not yet committed, oldest batch first: (batch, keys).
        self._batches: deque[tuple[int, list[bytes]]] = deque()
        # The batch being filled (the log's number, -1: none), its keys (the newest of
        # _batches) and, for a durable window, its record and the record's expiries.
        self._batch = -1
        self._keys: list[bytes] = []
        self._expiries: list[int] = []
        self._op: DedupeAppend | None = None

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

    def check(self, message: Message) -> bytes | None:
        """``message``'s key if the window has not seen it (``admit`` it once some queue
        took the message); ``SEEN`` if it has, counted as a duplicate; None if the message
        carries no key: ``expect``, then ``check_key``."""
        key = self.expect(message)
        if key is None:
            return None
        return self.check_key(key)

    def expect(self, message: Message) -> bytes | None:
        """``message``'s key (None: it carries none), read before the message is routed:
        the window fetches the key's table slot meanwhile (``Window.expect``), for
        ``check_key`` once it is routed. The usual table holds the key alone (no TTL
        header): one C call reads it."""
        key = self.reader.sole(message)
        if key is None:
            key, self._ttl_header = self.reader.read(message)
            if key is None:
                return None
        else:
            self._ttl_header = None
        self.window.expect(key)
        return key

    def check_key(self, key: bytes) -> bytes:
        """``key``, just read by ``expect``, if the window has not seen it; ``SEEN`` if it
        has, counted as a duplicate. The clock is read only when some key can expire, and
        the window's lookup is a C call compiled (``Window.seen``)."""
        window = self.window
        ttl_header = self._ttl_header
        self._ttl_header = None
        ttl = self._ttl if ttl_header is None else message_ttl(ttl_header, self._ttl)
        if ttl is None and not window.timed:  # no key expires: no clock
            self._expires = 0
            if window.seen(key, 0):
                self.duplicates += 1
                return SEEN
            return key
        now = now_ms(self._time)
        self._expires = now + ttl if ttl is not None else 0
        if window.seen(key, now):
            self.duplicates += 1
            return SEEN
        return key

    def duplicate(self, key: bytes, now: int) -> bool:
        """``key`` is in the window, unexpired at ``now``: counted as a duplicate."""
        if not self.window.seen(key, now):
            return False
        self.duplicates += 1
        return True

    def remember(self, key: bytes, ttl_header: object, now: int) -> None:
        """Some queue took the message carrying ``key``: the window holds it from ``now``
        until its ``x-cache-ttl`` header's TTL, or the exchange's, is over."""
        ttl = self._ttl if ttl_header is None else message_ttl(ttl_header, self._ttl)
        self._expires = now + ttl if ttl is not None else 0
        self.admit(key)

    def admit(self, key: bytes) -> None:
        """Some queue took the message whose new key ``check`` just returned: the window
        holds it until the expiry ``check`` worked out (``remember``'s, if that called)."""
        expires = self._expires
        order = self._order
        self._order = order + 1
        window = self.window
        window.add(key, order, expires)
        if self._log.batch != self._batch:  # the first key of a batch
            self._first_of_batch(key, order, expires)
            return
        self._keys.append(key)  # a durable window's record's own list of keys
        if self._op is not None:  # (its floor is read when the batch is taken)
            self._expiries.append(expires)  # the record's (op.expires), a C append compiled

    def _first_of_batch(self, key: bytes, order: int, expires: int) -> None:
        """Open this window's share of the log's pending batch: its record (durable) and
        its list of keys to take back if the write fails (``_on_commit``). A synchronous log
        writes each record at once, so there is no batch to keep appending to."""
        log = self._log
        if not log.deferred:
            if self.settings.persistent:
                log.append_dedupe(self.scope, order, key, expires, self.window.floor)
            return
        self._batch = log.batch
        op = None
        if self.settings.persistent:
            op = log.dedupe_op(self.scope, order)
            op.keys.append(key)
            op.expires.append(expires)
            op.window = self.window  # its floor, once the batch is taken
            # The keys to take back if the write fails are the record's: one list for both.
            self._keys = op.keys
            self._expiries = op.expires
        else:
            self._keys = [key]
            self._expiries = []
        self._batches.append((self._batch, self._keys))
        log.after_commit(self._on_commit)
        self._op = op

    def apply_policy(self, type_: str, arguments: Mapping[str, Any], durable: bool,
                     policy: Policy | None) -> None:
        """The exchange's policy changed (or a policy did): its window keys apply now."""
        settings = exchange_settings(type_, arguments, durable, policy)
        if settings is not None and settings != self.settings:
            self.reconfigure(settings)

    def reconfigure(self, settings: DedupeSettings) -> None:
        """A policy changed the window: a smaller size evicts the oldest keys now (the store
        follows with the next key's floor); a TTL applies to keys added from now on; kept
        in the store from now on, its keys so far are written, no longer kept, they are
        dropped from it."""
        was = self.settings.persistent
        self.settings = settings
        self._ttl = settings.ttl
        self.window.resize(settings.size)
        self._batch = -1  # the next key opens its batch again, record included
        self._op = None
        self._expiries = []
        if was and not settings.persistent:
            self._log.drop_dedupe(self.scope)
        elif settings.persistent and not was:
            floor = self.window.floor
            for key, order, expires in self.window.items():
                self._log.append_dedupe(self.scope, order, key, expires, floor)

    def drop(self) -> None:
        """The exchange was deleted: its window goes from the store too."""
        if self.settings.persistent:
            self._log.drop_dedupe(self.scope)
        self._op = None
        self._expiries = []
        self._batch = -1

    def _on_commit(self, ok: bool) -> None:
        """A batch holding keys of this window was written (``ok``) or lost."""
        _, keys = self._batches.popleft()
        if not ok:  # their copies were nacked and forgotten: let the retries in
            for key in keys:
                self.window.discard(key)
