"""What the broker model needs from the sessions its front doors open, as Protocols.

An AMQP connection (``amqp.connection.Connection``) registers in
``Broker.connections`` once open, and its socket adapter in
``Broker.protocols``. ``broker`` sits below ``amqp`` in the package layers, so
it names here what it and the front doors above it (the management API, Prometheus,
``leveret ctl``) read of them: counting and closing connections (limits, vhost
deletion, shutdown), the connection and channel facts RabbitMQ's API lists, channel
counters and unacked deliveries, a channel's permission cache, and blocking
publishers on an alarm. Nothing above reaches into a session's private state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sized
from typing import TYPE_CHECKING, Any, Protocol

from leveret.model.stats import MessageStats

if TYPE_CHECKING:
    from leveret.broker.permissions import Access
    from leveret.broker.vhost import VirtualHost
    from leveret.queues.entry import QueueEntry
    from leveret.queues.queue import Queue

# An unacked delivery: the entry, the queue it came from, and its consumer (None: basic.get).
Delivery = tuple["QueueEntry", "Queue", Any]


class ConfirmCount(Protocol):
    """A channel in confirm mode: how many publishes are not confirmed yet."""

    @property
    def unconfirmed(self) -> int: ...


class ChannelSession(Protocol):
    """An open channel: its settings, counters, unacked deliveries and permission cache."""

    @property
    def stats(self) -> MessageStats: ...

    access: Access

    @property
    def number(self) -> int: ...

    @property
    def connection(self) -> ClientSession: ...

    @property
    def vhost(self) -> VirtualHost | None: ...

    @property
    def consumers(self) -> Sized: ...

    @property
    def consumer_prefetch(self) -> int: ...

    @property
    def global_prefetch(self) -> int: ...

    @property
    def confirms(self) -> ConfirmCount | None: ...

    @property
    def tx(self) -> Sized | None: ...

    @property
    def active(self) -> bool: ...

    @property
    def unacked_count(self) -> int: ...

    def unacked_in(self, queue: Queue) -> list[tuple[QueueEntry, str]]:
        """Unacked deliveries from ``queue``, oldest first, with their consumer tags."""

    def deliveries(self) -> Iterator[Delivery]:
        """Every unacked delivery, oldest first; changes nothing."""


class ClientSession(Protocol):
    """An open client connection, as the broker sees it."""

    @property
    def name(self) -> str: ...

    @property
    def peer(self) -> tuple[str, int] | None: ...

    @property
    def local(self) -> tuple[str, int] | None: ...

    @property
    def tls_info(self) -> dict[str, Any] | None: ...

    @property
    def auth_mechanism(self) -> str: ...

    @property
    def client_properties(self) -> dict[str, Any]: ...

    @property
    def connected_at(self) -> float: ...

    @property
    def channel_max(self) -> int: ...

    @property
    def frame_max(self) -> int: ...

    @property
    def heartbeat(self) -> int: ...

    @property
    def blocked(self) -> bool: ...

    @property
    def recv_oct(self) -> int: ...

    @property
    def recv_cnt(self) -> int: ...

    @property
    def send_oct(self) -> int: ...

    @property
    def send_cnt(self) -> int: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def on_output(self) -> Callable[[], None]: ...

    @property
    def user(self) -> str | None: ...

    @property
    def vhost(self) -> VirtualHost | None: ...

    @property
    def channels(self) -> Mapping[int, ChannelSession]: ...

    def close(self, code: int = ..., text: str = ...) -> None:
        """Close it from the broker's side (connection.close with ``code``)."""


class Blockable(Protocol):
    """A socket adapter that can stop reading from publishers during an alarm."""

    def maybe_block(self) -> None: ...

    def unblock(self) -> None: ...
