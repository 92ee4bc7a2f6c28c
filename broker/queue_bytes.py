"""Body bytes of a queue's messages, counted when the management plane asks.

Theory of operation
-------------------
RabbitMQ's classic queue keeps byte totals as messages come and go
(``rabbit_variable_queue``: ``bytes``, ``unacked_bytes``, ``ram_bytes``,
``persistent_bytes``, ``delta_transient_bytes``). Leveret keeps none on the
AMQP path: publish, deliver and ack do no byte arithmetic. Each total is
counted here, from what is held anyway, when an API call, a ``list_queues``
or a scrape asks:

* ready, in memory (``ReadyStore.memory_bytes``): the featured and priority
  stores keep this total already (for ``x-max-length-bytes``); the plain
  store counts its fresh entries then, through ``queues/fifo_bytes.py``: the
  first count is a sum (about 50 ns an entry: at most ``PAGE_HIGH`` for a
  durable queue, but every ready message of a transient one, which never
  pages), the next ones walk only what was appended since, and at most
  ``fifo_bytes.STEP`` entries from the head.
* ready, paged out (``ReadyStore.paged_out_bytes``): the tails' ``bytes``
  (``queues/ready.py``), which they kept already as entries page out and back
  in (for byte limits). A restarted queue starts from the store's per-queue
  total (``QueueStats.bytes``) instead of not knowing it.
* unacknowledged: the channels hold the deliveries (``amqp/channel.py``).
  ``HeldBytes`` makes one pass over every channel's unacked map, the first
  time a queue with unacked messages asks, and serves the whole request from
  it: O(unacked deliveries on the node) once, not per queue.
* persistent (``messages_persistent`` too): a durable queue's persistent
  messages are exactly its stored entries not flagged transient, and the
  store keeps their count and bytes per queue (``lmdb_writer.py``); one O(1)
  committed read per durable queue with messages. Being the committed
  figure, it trails the queue by at most one group commit (milliseconds):
  a message counts once its publish is on disk, until its ack is.

An empty queue costs nothing (no scan, no read).

The fields as RabbitMQ 3.10.8 reports them (checked live with known body
sizes, persistent and transient, some delivered and unacked):

* ``message_bytes_ready`` / ``_unacknowledged``: body bytes of the ready /
  unacked messages; ``message_bytes``: their sum.
* ``message_bytes_ram``: of those, the bytes held in memory (unacked ones are).
* ``message_bytes_persistent``: bytes of the persistent messages of a durable
  queue, ready and unacked (0 in a transient queue, whatever the messages say).
* ``message_bytes_paged_out``: bytes of messages paged out to disk.

Where Leveret differs: its ``messages_paged_out`` counts every ready message
held only on disk (the tails), persistent or not, and ``message_bytes_paged_out``
their bytes, so that ``ram`` plus ``paged_out`` is the whole queue. RabbitMQ
3.10 counts only the *transient* messages of its on-disk ``delta`` there (a
persistent message on disk is neither in RAM nor "paged out"). When a tail's
bytes are not known (a store written by format 2, until the queue is next
empty; a failed store write, until the tail drains), they count 0 here:
reading a deep tail to count them is far too slow for an API call.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leveret.broker.sessions import ClientSession

# The management fields, in RabbitMQ's order.
FIELDS = ("message_bytes", "message_bytes_ready", "message_bytes_unacknowledged",
          "message_bytes_ram", "message_bytes_persistent", "message_bytes_paged_out")
_EMPTY = {**dict.fromkeys(FIELDS, 0), "messages_persistent": 0}


class HeldBytes:
    """Body bytes of the unacked deliveries of each queue, for one request: counted in one
    pass over every channel of ``connections``, the first time a queue with unacked
    messages asks (queues without any never cause it)."""

    __slots__ = ("_by_queue", "_connections")

    def __init__(self, connections: Iterable[ClientSession]) -> None:
        self._connections = connections
        self._by_queue: dict[int, int] | None = None

    def of(self, queue: Any) -> int:
        if not queue.unacked:
            return 0
        by_queue = self._by_queue
        if by_queue is None:
            by_queue = self._by_queue = {}
            get = by_queue.get
            for conn in list(self._connections):
                for channel in list(conn.channels.values()):
                    for entry, held_by, _ in channel.deliveries():
                        key = id(held_by)  # the queues outlive the request
                        by_queue[key] = get(key, 0) + len(entry.message.body)
        return by_queue.get(id(queue), 0)


def byte_fields(queue: Any, held: HeldBytes) -> dict[str, int]:
    """RabbitMQ's ``message_bytes*`` fields of ``queue``, and ``messages_persistent``."""
    ready, unacked = queue.message_count, queue.unacked
    if not ready and not unacked:
        return dict(_EMPTY)
    store = queue.ready
    in_memory = store.memory_bytes() if ready else 0
    paged_out = store.paged_out_bytes if queue.paged_out else 0
    held_bytes = held.of(queue)
    total = in_memory + paged_out + held_bytes
    persistent = persistent_bytes = 0
    log = queue.log
    if log is not None:
        stats = log.queue_stats(queue.qid)
        # Committed figures: clamped to the live ones while an ack's removal is in flight.
        persistent = max(0, min(stats.count - stats.transient, ready + unacked))
        if stats.bytes is not None:
            persistent_bytes = max(0, min(stats.bytes - stats.transient_bytes, total))
    return {
        "message_bytes": total,
        "message_bytes_ready": in_memory + paged_out,
        "message_bytes_unacknowledged": held_bytes,
        "message_bytes_ram": in_memory + held_bytes,
        "message_bytes_persistent": persistent_bytes,
        "message_bytes_paged_out": paged_out,
        "messages_persistent": persistent,
    }
