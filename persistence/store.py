"""The storage interface the broker core is written against.

Theory of operation
-------------------
The core never knows how things are stored. On the event loop thread it
tells the store what changed: durable definitions (exchanges, queues,
bindings) and the life of messages in durable queues (enqueued, delivered,
removed). The store only *records* those operations in a pending batch.

Making a batch durable is a separate step so that it can run off the event
loop: ``take_batch()`` (loop thread) detaches everything recorded so far, and
``write_batch(batch)`` (any one thread at a time) applies it in a single
write transaction and syncs it to disk, raising ``StoreError`` if that
fails. This is group commit: while one batch is being written, the next one
fills up, so the batch size follows the load. Publisher confirms for held
messages, and ``tx.commit-ok``, are released only after ``write_batch``
returned.

Reads (``read_queue``) see committed data only; a queue that pages its tail
to disk must therefore not read past what has been committed.

Messages are stored once however many queues they are in (a reference
count), keyed by ``Message.store_id`` which the store assigns on the first
``enqueue``. Queue entries are keyed by (queue id, queue sequence number) and
carry the message id, the delivery count (so ``redelivered`` survives a
restart), the entry's TTL expiry (absolute wall-clock ms, 0 = none, so
message TTLs survive a restart) and whether the message is transient (a transient entry only exists
on disk because its queue paged it out; it is dropped at the next start).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

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
class QueueStats:
    """What a recovered queue needs to know at startup, without reading its messages."""

    count: int  # entries on disk (ready and formerly unacked alike)
    first_seq: int  # lowest sequence number present (0 if empty)
    next_seq: int  # one past the highest sequence number ever stored (0 if empty)


@dataclass(frozen=True)
class StoredEntry:
    seq: int
    delivery_count: int
    message: Message  # with store_id set
    expires_at: int = 0  # absolute wall-clock ms (time.time() * 1000); 0 = never expires


class Store(Protocol):
    """What the broker needs from storage (all methods but write_batch: loop thread only)."""

    # -- definitions (recorded in the pending batch) --
    def load_definitions(self) -> Definitions: ...

    def put_exchange(self, exchange: ExchangeDef) -> None: ...

    def delete_exchange(self, vhost: str, name: str) -> None: ...

    def put_queue(self, queue: QueueDef) -> int:
        """Record a durable queue; returns its qid (stable across restarts)."""
        ...

    def delete_queue(self, vhost: str, name: str, qid: int) -> None:
        """Forget the queue and every entry it has on disk."""
        ...

    def put_binding(self, binding: BindingDef) -> None: ...

    def delete_binding(self, binding: BindingDef) -> None: ...

    def put_policy(self, policy: PolicyDef) -> None:
        """Record (or replace) the policy named ``policy.name`` in its vhost."""
        ...

    def delete_policy(self, vhost: str, name: str) -> None: ...

    def put_access(self, access: AccessDef) -> None:
        """Record (or replace) a user, vhost, permission or topic permission."""
        ...

    def delete_access(self, kind: str, key: tuple[str, ...]) -> None: ...

    # -- queue entries (recorded in the pending batch) --
    def enqueue(self, qid: int, seq: int, message: Message, transient: bool = False,
                expires_at: int = 0) -> None:
        """Add entry (qid, seq) for ``message``, storing the message itself if new.

        ``expires_at`` (absolute wall-clock ms, 0 = never) is kept with the entry and
        returned by ``read_queue``; ``mark_delivered`` leaves it unchanged."""
        ...

    def mark_delivered(self, qid: int, seq: int, message: Message, delivery_count: int) -> None:
        """Persist an entry's delivery count (its ``redelivered`` flag after a restart)."""
        ...

    def remove(self, qid: int, seq: int, message: Message) -> None:
        """The entry is gone (acked, rejected, dropped); the message goes with its last entry."""
        ...

    def purge(self, qid: int, from_seq: int = 0) -> None:
        """Remove the queue's entries with seq >= from_seq (a purge drops the paged tail;
        entries of unacked deliveries, which are older, stay until settled)."""
        ...

    # -- reads (committed data only) --
    def queue_stats(self, qid: int) -> QueueStats: ...

    def read_queue(self, qid: int, from_seq: int, limit: int) -> list[StoredEntry]:
        """Up to ``limit`` committed entries with seq >= from_seq, in order."""
        ...

    # -- group commit --
    def has_pending(self) -> bool: ...

    def take_batch(self) -> Any:
        """Detach everything recorded since the last call (loop thread)."""
        ...

    def write_batch(self, batch: Any) -> None:
        """Apply ``batch`` in one transaction and sync it; raises StoreError (any thread)."""
        ...

    def close(self) -> None: ...
