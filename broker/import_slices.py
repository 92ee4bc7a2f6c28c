"""A large definitions import, checked and applied in slices so AMQP runs between them.

``definitions.apply`` checks a file and applies it in one go. Over HTTP, a
100,000-queue file held the event loop for 11 s that way (an AMQP handshake
timed out meanwhile) and put the whole import in one batch. ``apply_in_slices``
runs the same checks (``definitions.plan_steps``) and the same operations, and
gives the loop back every ``SLICE_SECONDS``:

* the whole file is still checked before anything is applied: an invalid file
  raises ``Invalid`` and changes nothing;
* while it applies, the group commit writes what the import recorded so far;
  while a write is in flight the import lets at most ``IMPORT_PENDING``
  operations pile up behind it, then waits for it: no batch holds the whole
  file, and the import alone never makes the writer backlogged
  (``MAX_PENDING``), which would pause every client's socket;
* the answer still waits for the commit of the last slice (``router.py``);
* between slices, what the import built is frozen out of the collector's walks
  (``freeze_survivors``): 100,000 new queues are millions of objects, and each
  generation-1 or -2 collection that walked them held the loop 1-1.6 s.

Where it differs from an import in one go: other clients run between slices.
An item that another client changed meanwhile so that it no longer applies (a
queue redeclared with other arguments, a vhost deleted) is skipped and logged
in one line: that change stands, as if it had come just after the import. A
crash before the answer may leave part of the file applied; the client never
got an answer, and an import is additive, so sending it again completes it.
RabbitMQ 3.10's own import applies item by item and stops at the first failure,
keeping what it applied before it.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from leveret.broker import definitions
from leveret.broker.accounts import AccountError
from leveret.model.errors import ChannelError
from leveret.persistence.group_commit import GroupCommit

if TYPE_CHECKING:
    from leveret.broker.broker import Broker

log = logging.getLogger(__name__)

# The longest an import holds the loop at a time: AMQP heartbeats, handshakes and other
# requests wait no longer than this (plus what they cost themselves).
SLICE_SECONDS = 0.01
# Items checked or applied between two looks at the clock.
CHECK_EVERY = 32
# Operations the import lets wait for a write in flight: a tenth of the backlog that pauses
# clients (group_commit.MAX_PENDING), so what they record still fits beside it.
IMPORT_PENDING = 5_000


def freeze_survivors() -> None:
    """Collect the young generations' cycles, then freeze everything that survives, as
    start-up freezes what recovery built (``node.process.tune_gc``): never walked again, still
    freed by reference counting. Each call walks only what was made since the last one
    (one slice). The price: a cycle that was already garbage in the oldest generation
    when the import started is kept; the broker leaves none by design (``protocol.py``,
    ``queues/deleted.py``)."""
    gc.collect(1)
    gc.freeze()


class Slicer:
    """Counts steps and, once ``SLICE_SECONDS`` have passed, gives the loop back."""

    def __init__(self, commit_log: GroupCommit, clock: Callable[[], float],
                 between: Callable[[], None] = freeze_survivors) -> None:
        self.commit_log = commit_log
        self.clock = clock
        self.between = between
        self.steps = 0
        self.since = clock()
        self.slices = 1

    def due(self) -> bool:
        self.steps += 1
        return self.steps % CHECK_EVERY == 0 and self.clock() - self.since >= SLICE_SECONDS

    async def pause(self) -> None:
        self.between()
        await asyncio.sleep(0)  # one loop turn: sockets are read, the commit is started
        while self.commit_log.waiting_over(IMPORT_PENDING):
            await self._caught_up()
        self.slices += 1
        self.since = self.clock()

    async def _caught_up(self) -> None:
        """Until the write in flight returns (what piled up behind it becomes its batch)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def caught_up() -> None:
            if not done.done():
                done.set_result(None)

        self.commit_log.when_caught_up(caught_up)
        await done


async def apply_in_slices(broker: Broker, defs: object, only_vhost: str | None = None,
                          clock: Callable[[], float] = time.perf_counter) -> tuple[int, int]:
    """Check ``defs`` whole, then apply it, in slices; returns (applied, skipped).
    Raises ``Invalid`` with nothing applied."""
    if not isinstance(defs, dict):
        raise definitions.Invalid("the file does not hold a JSON object")
    slicer = Slicer(broker.log, clock)
    ops: list[definitions.Op] = []
    for _ in definitions.plan_steps(broker, defs, only_vhost, ops):
        if slicer.due():
            await slicer.pause()
    skipped = 0
    for what, op in ops:
        try:
            op()
        except (ChannelError, AccountError, KeyError) as exc:
            skipped += 1
            text = exc.detail if isinstance(exc, ChannelError) else str(exc)
            log.warning("definitions import: %s skipped, changed meanwhile: %s", what, text)
        if slicer.due():
            await slicer.pause()
    log.debug("definitions import applied in %d slice(s)", slicer.slices)
    return len(ops) - skipped, skipped
