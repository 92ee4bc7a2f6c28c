"""What the broker model needs from the sessions its front doors open, as Protocols.

An AMQP connection (``amqp.connection.Connection``) registers in
``Broker.connections`` once open, and its socket adapter in
``Broker.protocols``. ``broker`` sits below ``amqp`` in the package layers, so
it names here the little it uses of them: counting and closing connections
(limits, vhost deletion, shutdown), reading channel counters, refreshing a
channel's permission cache, and blocking publishers on an alarm.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from leveret.model.stats import MessageStats

if TYPE_CHECKING:
    from leveret.broker.permissions import Access
    from leveret.broker.vhost import VirtualHost


class ChannelSession(Protocol):
    """An open channel: its message counters and its cache of permission decisions."""

    @property
    def stats(self) -> MessageStats: ...

    access: Access


class ClientSession(Protocol):
    """An open client connection, as the broker sees it."""

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
