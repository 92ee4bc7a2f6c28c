"""Give freed memory back once the broker goes quiet.

A burst (a deep backlog published and drained) leaves glibc's heap holding the freed
bodies, and the store's file pages mapped, until something asks for them back; under the
paging threshold nothing did, so an idle broker kept a burst's peak for good (RabbitMQ's
node returns to its idle size). Trimming while messages flow costs them page faults
(``watchers.check_memory``), so it waits for quiet: message counters unchanged for
``QUIET_SECONDS``, then one release, and none again until messages have moved.
"""

from __future__ import annotations

from typing import Final

# Unchanged counters for this long (in the memory watcher's ticks of about a second) make the
# broker quiet: long enough that a pause between two batches is not one.
QUIET_SECONDS: Final = 10.0


class QuietTrim:
    """Fed the broker's message counters' sum at each tick, says when to release memory."""

    __slots__ = ("_last", "_since", "_trimmed", "quiet_after")

    def __init__(self, quiet_after: float = QUIET_SECONDS) -> None:
        self.quiet_after = quiet_after
        self._last = -1
        self._since = 0.0
        self._trimmed = True  # nothing to give back before the first message

    def due(self, activity: int, now: float) -> bool:
        """True once per quiet spell: ``activity`` unchanged since ``quiet_after`` s ago."""
        if activity != self._last:
            if self._last != -1:
                self._trimmed = False
            self._last = activity
            self._since = now
            return False
        if self._trimmed or now - self._since < self.quiet_after:
            return False
        self._trimmed = True
        return True
