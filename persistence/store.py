"""The storage interface the broker core is written against.

Theory of operation
-------------------
The core never knows how things are stored. On the event loop thread it
records what changed in a pending batch (``batch.Recorder``, which the group
commit is): durable definitions (exchanges, queues, bindings, policies) and
the life of messages in durable queues (enqueued, delivered, removed).

Making a batch durable is a separate step so that it can run off the event
loop: ``take_batch()`` (loop thread) detaches everything recorded so far, and
the store's ``write_batch(batch)`` (any one thread at a time) applies it in a single
write transaction and syncs it to disk, raising ``StoreError`` if that
fails. This is group commit: while one batch is being written, the next one
fills up, so the batch size follows the load. Publisher confirms for held
messages, and ``tx.commit-ok``, are released only after ``write_batch``
returned.

Reads (``read_queue``) see committed data only; a queue that pages its tail
to disk must therefore not read past what has been committed.

Messages are stored once however many queues they are in (a reference
count), keyed by ``Message.store_id`` which the recorder assigns on the first
``enqueue``. Queue entries are keyed by (queue id, queue sequence number) and
carry the message id, the delivery count (so ``redelivered`` survives a
restart), the entry's TTL expiry (absolute wall-clock ms, 0 = none, so
message TTLs survive a restart) and whether the message is transient (a transient entry only exists
on disk because its queue paged it out; it is dropped at the next start).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from leveret.model.message import Message


class StoreError(Exception):
    """Storage failed or is unusable; the message names the path and the cause."""


@dataclass(frozen=True)
class ExchangeDef:
    vhost: str
    name: str
    type: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class QueueDef:
    vhost: str
    name: str
    durable: bool = True
    auto_delete: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)
    qid: int = 0  # the store's id for the queue's entries; assigned by put_queue


@dataclass(frozen=True)
class BindingDef:
    vhost: str
    source: str
    destination: str
    destination_type: str  # "queue" | "exchange"
    routing_key: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyDef:
    """A policy as stored (``queues/policy.py`` validates and applies it)."""

    vhost: str
    name: str
    pattern: str
    apply_to: str = "all"  # "queues" | "exchanges" | "all"
    definition: dict[str, Any] = field(default_factory=dict)  # JSON values
    priority: int = 0


@dataclass(frozen=True)
class AccessDef:
    """A user, vhost, permission or topic permission, as its definitions-format record.

    ``broker/`` gives the records their meaning (limits ride on the user and
    vhost records); the store only keeps them by ``(kind, *key)``."""

    kind: str  # "user" | "vhost" | "permission" | "topic_permission"
    key: tuple[str, ...]
    record: dict[str, Any] = field(default_factory=dict)  # JSON values


@dataclass
class Definitions:
    exchanges: list[ExchangeDef] = field(default_factory=list)
    queues: list[QueueDef] = field(default_factory=list)
    bindings: list[BindingDef] = field(default_factory=list)
    policies: list[PolicyDef] = field(default_factory=list)
    access: list[AccessDef] = field(default_factory=list)


@dataclass(frozen=True)
class StoreState:
    """What recording needs to know of a store it did not write itself (at startup)."""

    next_msg_id: int = 1  # message ids below it may have been used
    next_qid: int = 1
    last_seq: int = 0  # sequence number of the last batch applied
    qids: dict[tuple[str, str], int] = field(default_factory=dict)  # (vhost, queue) -> qid


@dataclass(frozen=True)
class StoreSpace:
    """How much disk the store takes, and how much of that it can reuse before growing."""

    file_bytes: int = 0  # size of the store's file(s)
    free_bytes: int = 0  # inside them, free for new data (counts as free disk space)


@dataclass(frozen=True)
class QueueStats:
    """What a recovered queue needs to know at startup, without reading its messages; and
    what the management plane reads of a running one (its persistent messages: the
    entries not flagged transient)."""

    count: int  # entries on disk (ready and formerly unacked alike)
    first_seq: int  # lowest sequence number present (0 if empty)
    next_seq: int  # one past the highest sequence number ever stored (0 if empty)
    bytes: int | None = 0  # their body bytes; None: not known (entries of an older format)
    transient: int = 0  # of them, transient entries (paged out, dropped at the next start)
    transient_bytes: int = 0  # and their body bytes


class StoredEntry(NamedTuple):
    """One entry read back from the store (a tuple: built once per message paged in, where a
    frozen dataclass's ``__init__`` cost three times as much)."""

    seq: int
    delivery_count: int
    message: Message  # with store_id set
    expires_at: int = 0  # absolute wall-clock ms (time.time() * 1000); 0 = never expires


class Store(Protocol):
    """What the broker needs from storage (all methods but write_batch: loop thread only).

    Changes are not made through the store: they are recorded in a
    ``batch.Batch`` (by ``batch.Recorder``, which group commit is) and the
    store applies whole batches (``write_batch``), each through the one op
    dispatcher ``apply.apply_batch``.
    """

    def state(self) -> StoreState:
        """Ids and the last batch sequence number, as committed (to start recording from)."""
        ...

    # -- reads (committed data only) --
    def load_definitions(self) -> Definitions: ...

    def queue_stats(self, qid: int) -> QueueStats:
        """Committed counts of a queue's entries; O(1), no message is read."""
        ...

    def read_queue(self, qid: int, from_seq: int, limit: int) -> list[StoredEntry]:
        """Up to ``limit`` committed entries with seq >= from_seq, in order."""
        ...

    def read_entries(self, qid: int, seqs: Sequence[int]) -> list[StoredEntry]:
        """The committed entries among ``seqs`` (in their order; absent ones left out)."""
        ...

    def load_dedupe(self, scope: bytes) -> list[tuple[bytes, int, int]]:
        """A durable deduplication window's committed keys: (key, order, expires_at), oldest
        first (``batch.DedupeAppend``). A key placed twice (added again after it expired)
        is there twice: the newer place is the one that counts."""
        ...

    def read_stamps(self, qid: int, from_seq: int, limit: int) -> list[tuple[int, int, int]]:
        """Up to ``limit`` committed entries with seq >= from_seq as (seq, expires_at, body
        bytes or 0 if unknown), reading the index alone: a stream rebuilds its segment index
        from these at startup without reading its messages."""
        ...

    # -- writes --
    def write_batch(self, batch: Any) -> None:
        """Apply ``batch`` in one transaction and sync it; raises StoreError (any thread)."""
        ...

    @property
    def reclaiming(self) -> bool:
        """Deleted queues' entries are left to remove (``reclaim``)."""
        ...

    def reclaim(self) -> None:
        """Remove one bounded slice of deleted queues' entries in a write of its own (the
        writer's thread, between batches: group commit calls it while no batch waits)."""
        ...

    def close(self) -> None: ...

    # -- space --
    def space(self) -> StoreSpace:
        """File size and free space inside it (tens of microseconds)."""
        ...

    def file_bytes(self) -> int:
        """The file's size alone, cheap enough to call after every commit."""
        ...

    def compact_copy(self) -> Any:
        """Write a compacted copy of the committed data (no write may run meanwhile; any
        thread); returns what ``compact_swap`` needs, or None if there is nothing to do."""
        ...

    def compact_swap(self, copy: Any) -> None:
        """Replace the store by the copy (loop thread, no write running, no read open)."""
        ...
