"""What a queue needs from the outside: its vhost and its durability log, as Protocols.

A queue lives in a vhost (``broker.vhost.VirtualHost``) and, when durable,
records its entries through the group commit (``persistence.group_commit``).
``queues`` sits below ``broker`` in the package layers, so it names only the
few things it uses, here, instead of importing either side.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from leveret.model.message import Message

if TYPE_CHECKING:
    from leveret.exchanges import Exchange
    from leveret.persistence.store import QueueStats, StoredEntry
    from leveret.queues.paging import Paging
    from leveret.queues.queue import Queue
    from leveret.queues.tracing import Tracer
    from leveret.queues.ttl import Timekeeping


class QueueHost(Protocol):
    """A vhost, as its queues see it: where dead letters are routed and who deletes."""

    @property
    def name(self) -> str: ...

    @property
    def exchanges(self) -> Mapping[str, Exchange]: ...

    @property
    def queues(self) -> Mapping[str, Queue]: ...

    @property
    def time(self) -> Timekeeping: ...

    @property
    def paging(self) -> Paging:
        """The broker's memory state its durable queues page by (``paging.py``)."""

    @property
    def tracer(self) -> Tracer | None:
        """Set while the vhost is traced (``tracing.py``): one test where a queue drops."""

    def delete_queue(self, queue: Queue) -> int:
        """Remove the queue (x-expires, auto-delete); returns its ready count."""

    def publish_routed(self, message: Message, queues: Sequence[Queue]) -> None:
        """Offer ``message`` to ``queues``, routed by the caller (a dead letter), through
        the broker's publish operation; a queue that refuses it drops it."""


class QueueLog(Protocol):
    """The group commit, as a durable queue records through it."""

    @property
    def batch(self) -> int: ...

    def enqueue(self, qid: int, seq: int, message: Message, transient: bool = False,
                expires_at: int = 0, cluster: int = 0) -> None: ...

    def mark_delivered(self, qid: int, seq: int, message: Message,
                       delivery_count: int) -> None: ...

    def mark_delivered_below(self, qid: int, below: int) -> None: ...

    def remove(self, qid: int, seq: int, message: Message | None = None) -> None: ...

    def remove_many(self, qid: int, seqs: list[int]) -> None: ...

    def purge(self, qid: int, from_seq: int = 0) -> None: ...

    def read_queue(self, qid: int, from_seq: int, limit: int) -> list[StoredEntry]: ...

    def read_entries(self, qid: int, seqs: Sequence[int]) -> list[StoredEntry]: ...

    def queue_stats(self, qid: int) -> QueueStats:
        """The store's committed counts of the queue's entries (O(1): no message read)."""

    def after_commit(self, callback: Callable[[bool], None]) -> None: ...
