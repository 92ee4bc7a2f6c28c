"""Message TTL (``x-message-ttl``, per-message ``expiration``) and queue TTL (``x-expires``).

Theory of operation
-------------------
Message TTL. An entry's expiry is fixed when it enters the queue:
``enqueue time + min(queue TTL, message expiration)``, as an absolute
wall-clock time in ms (RabbitMQ also uses the system clock, and an absolute
wall time is what a durable entry can keep across a restart). Requeueing
keeps it. Expiry is lazy, at the head only, as in RabbitMQ's classic queues:
an entry is dropped (or dead-lettered with reason ``expired``) when it
reaches the head and its time has come (``now >= expires_at``); entries
behind an unexpired head wait, and count as ready until then. So that a
queue without consumers also expires its messages, one timer per queue is
armed for the head's expiry (``ExpiryTimer``); when it fires the queue drops
its expired head run and re-arms for the new head.

TTL 0 replaces the ``immediate`` flag: a message is delivered if a consumer
can take it during its own publish, and expires otherwise. The queue does
that by exempting the entry being published from the check while it
dispatches it.

Queue TTL. A queue with ``x-expires`` is deleted (its messages are *not*
dead-lettered) once unused for that long: no consumers, no ``basic.get`` and
no (re)declare. ``Lease`` tracks the last use on the monotonic clock and
keeps one timer.

Time is injected: the vhost carries ``clock`` (monotonic seconds, for
leases), ``wall_clock`` (``time.time``, for expiries and x-death) and
``scheduler`` (anything with ``call_later(delay, callback)`` returning a
handle with ``cancel()``: the asyncio loop in the server, a fake in unit
tests, or None, in which case expiry is purely lazy).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from leveret.queues.settings import QueueSettings

log = logging.getLogger(__name__)

# A timer never fires earlier than this after being armed (s): a head whose expiry is
# already due is dropped on the next loop turn instead of recursively within the caller.
MIN_DELAY = 0.0


class Handle(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def call_later(self, delay: float, callback: Callable[[], None]) -> Handle: ...


class Timekeeping:
    """Clocks and timers a queue uses, taken from its vhost (defaults: real time, no timers)."""

    __slots__ = ("clock", "scheduler", "wall_clock")

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time,
                 scheduler: Scheduler | None = None) -> None:
        self.clock = clock
        self.wall_clock = wall_clock
        self.scheduler = scheduler


SYSTEM = Timekeeping()


def timekeeping_of(vhost: Any) -> Timekeeping:
    """The vhost's clocks (a vhost-less queue in a unit test gets real clocks, no timers)."""
    return getattr(vhost, "time", None) or SYSTEM


def now_ms(tk: Timekeeping) -> int:
    return int(tk.wall_clock() * 1000)


def effective_ttl(settings: QueueSettings, expiration: int) -> int | None:
    """min(queue TTL, message expiration) in ms; ``expiration`` is -1 when the message has none."""
    ttl = settings.message_ttl
    if expiration >= 0 and (ttl is None or expiration < ttl):
        return expiration
    return ttl


def expiry_of(settings: QueueSettings, expiration: int, now: int) -> int | None:
    """Absolute expiry (wall ms) of an entry enqueued at ``now``, or None."""
    ttl = effective_ttl(settings, expiration)
    return None if ttl is None else now + ttl


def is_expired(expires_at: int | None, now: int) -> bool:
    return expires_at is not None and now >= expires_at


class ExpiryTimer:
    """One timer per queue, armed for the earliest expiry it was asked about."""

    __slots__ = ("_callback", "_due", "_handle", "_tk")

    def __init__(self, tk: Timekeeping, callback: Callable[[], None]) -> None:
        self._tk = tk
        self._callback = callback
        self._handle: Handle | None = None
        self._due = 0

    @property
    def armed(self) -> bool:
        return self._handle is not None

    @property
    def due(self) -> int:
        return self._due

    def arm(self, expires_at: int) -> None:
        """Make sure the timer fires no later than ``expires_at`` (wall ms)."""
        scheduler = self._tk.scheduler
        if scheduler is None:
            return
        if self._handle is not None:
            if self._due <= expires_at:
                return
            self._handle.cancel()
        self._due = expires_at
        delay = max(MIN_DELAY, (expires_at - now_ms(self._tk)) / 1000)
        self._handle = scheduler.call_later(delay, self._fire)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        try:
            self._callback()
        except Exception as exc:  # noqa: BLE001 - one line, not the loop's traceback
            log.error("message expiry failed: %r", exc)


class Lease:
    """``x-expires``: call ``expire`` once unused for ``settings.expires`` ms."""

    __slots__ = ("_expire", "_handle", "_in_use", "_last_used", "_tk", "ms")

    def __init__(self, tk: Timekeeping, ms: int, expire: Callable[[], None],
                 in_use: Callable[[], bool]) -> None:
        self._tk = tk
        self.ms = ms
        self._expire = expire
        self._in_use = in_use
        self._last_used = tk.clock()
        self._handle: Handle | None = None
        self._arm(ms / 1000)

    def renew(self) -> None:
        """The queue was used (declared, basic.get, its last consumer left)."""
        self._last_used = self._tk.clock()
        if self._handle is None:
            self._arm(self.ms / 1000)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self, delay: float) -> None:
        scheduler = self._tk.scheduler
        if scheduler is not None:
            self._handle = scheduler.call_later(max(0.0, delay), self._fire)

    def _fire(self) -> None:
        self._handle = None
        if self._in_use():
            return  # consumers: renewed when the last one leaves
        left = self._last_used + self.ms / 1000 - self._tk.clock()
        if left > 0:
            self._arm(left)
            return
        self._expire()
