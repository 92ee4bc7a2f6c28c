"""How many ready entries a durable queue keeps in memory: RabbitMQ 3.10's paging.

Theory of operation
-------------------
A persistent message is written to the disk store when it is published, and
RabbitMQ 3.10's classic queues keep it in memory as well until memory runs
short: only above ``vm_memory_high_watermark_paging_ratio`` (0.5) of the
memory high watermark do queues page their messages out, and a *lazy* queue
(``x-queue-mode: lazy``) always keeps as little as it can in memory. Leveret
does the same with one number per queue, ``Queue.page_high``: the ready
entries its store keeps in memory before new ones live only on disk (the
store's ``Tail``, ``ready.py``). It is ``PAGE_HIGH`` (``plain_store.py``) for a
lazy queue and for every queue while the broker is over its paging threshold,
and unbounded otherwise. A queue that is pressed pages out the entries it holds
beyond ``PAGE_HIGH`` (``page_out`` of its store: those already on disk), so its
memory goes down as well as stopping growth.

Why it matters: a backlog that fits in memory is delivered from memory, with no
read back from the store. The Spark pipeline's broker work relays a
100,000-row backlog with 35 us of broker CPU per row instead of 47-50 when all
but 10,000 rows were read back from LMDB (the bench journal,
``git show f42cb0b:bench/README.md``, "Paging").

The memory watcher (``node/watchers.py``) sets ``pressed`` once a second from
the process's RSS; ``Broker.set_memory_pressure`` tells every queue.
"""

from __future__ import annotations

from leveret.queues import plain_store
from leveret.queues.settings import QueueSettings

# A queue that does not page: more ready entries than any queue will hold.
UNBOUNDED = 1 << 62


class Paging:
    """The broker's memory state, as its queues page by it (one per broker)."""

    __slots__ = ("pressed",)

    def __init__(self, pressed: bool = False) -> None:
        self.pressed = pressed  # RSS above the paging threshold

    def page_high(self, settings: QueueSettings) -> int:
        """Ready entries a durable queue with ``settings`` keeps in memory."""
        if settings.lazy or self.pressed:
            return plain_store.PAGE_HIGH
        return UNBOUNDED
