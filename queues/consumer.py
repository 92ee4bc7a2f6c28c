"""A consumer: a channel's subscription to one queue, with its prefetch window.

Prefetch follows RabbitMQ: ``basic.qos(global=false)`` sets the limit of each
consumer created afterwards on the channel (``prefetch``), and
``basic.qos(global=true)`` limits all unacked deliveries of the channel
together (checked through ``channel.has_room()``). Both may apply at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from leveret.queues.queue import Queue, QueueEntry


class Writable(Protocol):
    @property
    def writable(self) -> bool: ...


class SharedContent(Protocol):
    """One message's content frames, encoded by the first channel that delivers it and
    reused by every later one of the same channel number and frame_max (``frames_key``,
    0 until encoded): a stream's readers deliver the same entries."""

    frames: bytes
    frames_key: int


class Channel(Protocol):
    """What a consumer needs from the channel it delivers on (an AMQP channel in practice)."""

    @property
    def active(self) -> bool: ...

    @property
    def connection(self) -> Writable: ...

    def has_room(self) -> bool: ...

    def deliver(self, consumer: Consumer, entry: QueueEntry) -> None: ...

    def deliver_shared(self, consumer: Consumer, entry: QueueEntry,
                       shared: SharedContent) -> None: ...

    def consumer_cancelled_by_broker(self, consumer: Consumer) -> None:
        """The queue went away under ``consumer`` (deleted): tell the client."""


class Consumer:
    __slots__ = (
        "arguments",
        "channel",
        "counters",
        "exclusive",
        "no_ack",
        "prefetch",
        "priority",
        "queue",
        "tag",
        "unacked",
    )

    def __init__(
        self,
        tag: str,
        channel: Channel,
        queue: Queue,
        no_ack: bool,
        exclusive: bool,
        prefetch: int,
        priority: int = 0,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        self.tag = tag
        self.channel = channel
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.priority = priority
        self.prefetch = prefetch
        self.unacked = 0
        self.arguments = arguments or {}
        # The channel's counters for this queue, counted per delivery and ack (set by the
        # AMQP channel at basic.consume: model/object_stats.py's QueueCounters).
        self.counters: Any = None

    def __repr__(self) -> str:
        return f"<Consumer {self.tag!r} on {self.queue.name!r} unacked={self.unacked}>"

    def can_take(self) -> bool:
        """Room for one more delivery: no-ack consumers are only held by channel flow."""
        channel = self.channel
        if self.no_ack:
            return channel.active and channel.connection.writable
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        return channel.has_room()

    def deliver(self, entry: QueueEntry) -> None:
        channel = self.channel
        channel.deliver(self, entry)

    def deliver_shared(self, entry: QueueEntry, shared: SharedContent) -> None:
        channel = self.channel
        channel.deliver_shared(self, entry, shared)
