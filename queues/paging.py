"""How many ready entries a durable queue keeps in memory: paged by default.

Theory of operation
-------------------
A persistent message is written to the disk store when it is published. A durable
queue keeps at most ``Paging.bound`` ready entries in memory (the setting
``queue_messages_in_memory``, 10,000 by default); beyond it new entries live only on
disk (the store's ``Tail``, ``ready.py``) and are read back in key order, in runs, as
the head drains (``persistence/lmdb_reads.py``). So a backlog of millions costs the
broker the same memory as one of ten thousand, as in RabbitMQ 3.12's classic queues,
which page by default.

``queue_messages_in_memory = 0`` keeps RabbitMQ 3.10's behaviour instead: a backlog stays
in memory as well as on disk until memory runs short, above
``vm_memory_high_watermark_paging_ratio`` (0.5) of the memory high watermark. A backlog
that fits in memory is then delivered with no read back from the store, at the cost of
that memory (``docs/benchmarks.md``, "Deep queues"). Whatever the bound, a *lazy* queue
(``x-queue-mode: lazy``) and every queue while the broker is over its paging threshold
keep at most ``PAGE_HIGH`` (``plain_store.py``); a queue that is pressed pages out the
entries it holds beyond it (``page_out`` of its store: those already on disk), so its
memory goes down as well as stopping growth.

The memory watcher (``node/watchers.py``) sets ``pressed`` once a second from
the process's RSS; ``Broker.set_memory_pressure`` tells every queue.
"""

from __future__ import annotations

from leveret.queues import plain_store
from leveret.queues.settings import QueueSettings

# A queue that does not page: more ready entries than any queue will hold.
UNBOUNDED = 1 << 62
# The default bound (``queue_messages_in_memory``): enough ready messages in memory for a
# consumer's next prefetch windows while the tail is read back behind them.
DEFAULT_BOUND = 10_000


class Paging:
    """The broker's paging bound and memory state, as its queues page by them (one per
    broker)."""

    __slots__ = ("bound", "pressed")

    def __init__(self, bound: int = DEFAULT_BOUND, pressed: bool = False) -> None:
        self.bound = bound or UNBOUNDED  # ready entries in memory per queue (0: no bound)
        self.pressed = pressed  # RSS above the paging threshold

    def page_high(self, settings: QueueSettings) -> int:
        """Ready entries a durable queue with ``settings`` keeps in memory."""
        if settings.lazy or self.pressed:
            return min(self.bound, plain_store.PAGE_HIGH)
        return self.bound
