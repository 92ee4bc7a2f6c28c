"""The storage interface the broker core is written against.

The core never knows how things are stored. It tells the store about durable
definitions (exchanges, queues, bindings) as they change, and about messages
that must survive a restart (persistent messages in durable queues) as they
are enqueued and settled. Writes are collected and made durable by
``commit``; its callback runs once they are safe (or failed), and is where
publisher confirms for held messages are released. ``MemoryStore`` keeps
everything in dicts (nothing survives the process); the LMDB store is the
durable implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


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


@dataclass(frozen=True)
class BindingDef:
    vhost: str
    source: str
    destination: str
    destination_type: str  # "queue" | "exchange"
    routing_key: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass
class Definitions:
    exchanges: list[ExchangeDef] = field(default_factory=list)
    queues: list[QueueDef] = field(default_factory=list)
    bindings: list[BindingDef] = field(default_factory=list)


CommitCallback = Callable[[bool], None]


class Store(Protocol):
    """What the broker needs from storage."""

    def load_definitions(self) -> Definitions: ...

    def put_exchange(self, exchange: ExchangeDef) -> None: ...

    def delete_exchange(self, vhost: str, name: str) -> None: ...

    def put_queue(self, queue: QueueDef) -> None: ...

    def delete_queue(self, vhost: str, name: str) -> None: ...

    def put_binding(self, binding: BindingDef) -> None: ...

    def delete_binding(self, binding: BindingDef) -> None: ...

    def commit(self, callback: CommitCallback | None = None) -> None:
        """Make every write so far durable, then call ``callback(ok)``."""
        ...

    def close(self) -> None: ...
