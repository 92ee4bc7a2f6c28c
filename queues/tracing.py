"""Message tracing: a capped ring of life events per vhost, on demand (issue 13).

Theory of operation
-------------------
RabbitMQ's firehose republishes every message to ``amq.rabbitmq.trace``, a
copy per event, at a large cost. Here tracing is a ``Tracer`` hung on the
vhost (``VirtualHost.tracer``) while someone asked for it, ``None``
otherwise: each place where a message's life moves on (publish in a channel,
delivery, settlement, a queue dropping it) tests that one attribute and does
nothing more when it is ``None``.

When on, an event is a small dict (``event``, ``timestamp`` in seconds since
the epoch, the message's ``message_id``, exchange and routing key, and the
details of the step) appended to a ring of ``capacity`` events: memory is
bounded (the oldest events go first; ``evicted`` counts them), and shown by
``describe``. A ``queue`` pattern limits tracing to the queues it matches
(``re.search``, as policies match names): queue events of other queues are
not recorded, and a publish only if it reached a matching queue.

Subscribers (the SSE stream) are callables fed each event as it is recorded;
they must not block (the HTTP side queues them with a bound).

It lives in ``queues`` (below ``broker``) because queues record their own
events (expire, dead-letter, drop) through it.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leveret.model.message import Message

# Events a ring may hold at most (about 0.5 KB each): 100,000 events stay near 50 MB.
MAX_CAPACITY = 100_000
DEFAULT_CAPACITY = 10_000
EVENTS = ("publish", "route", "enqueue", "deliver", "ack", "nack", "reject", "expire",
          "dead-letter", "drop", "return")

Event = dict[str, Any]
Subscriber = Callable[[Event], None]


class Tracer:
    __slots__ = ("capacity", "evicted", "pattern", "ring", "started", "subscribers")

    def __init__(self, capacity: int = DEFAULT_CAPACITY, queue: str | None = None) -> None:
        """``ValueError`` for a capacity out of range or a pattern that is not a regex."""
        if not 1 <= capacity <= MAX_CAPACITY:
            raise ValueError(f"capacity must be between 1 and {MAX_CAPACITY}")
        self.capacity = capacity
        try:
            self.pattern = re.compile(queue) if queue else None
        except re.error as exc:
            raise ValueError(f"queue is not a regular expression: {exc}") from None
        self.ring: deque[Event] = deque(maxlen=capacity)
        self.evicted = 0
        self.started = time.time()
        self.subscribers: list[Subscriber] = []

    def traces(self, queue: str) -> bool:
        pattern = self.pattern
        return pattern is None or pattern.search(queue) is not None

    def record(self, event: str, message: Message, **details: Any) -> None:
        ring = self.ring
        if len(ring) == self.capacity:
            self.evicted += 1
        item: Event = {"event": event, "timestamp": round(time.time(), 6),
                       "message_id": message_id(message), "exchange": message.exchange,
                       "routing_key": message.routing_key, **details}
        ring.append(item)
        for subscriber in self.subscribers:
            subscriber(item)

    def queue_event(self, event: str, queue: str, message: Message, **details: Any) -> None:
        """An event in one queue's life of the message (filtered by the queue pattern)."""
        if self.traces(queue):
            self.record(event, message, queue=queue, **details)

    def published(self, message: Message, queues: Iterable[str], user: str, channel: int,
                  mandatory: bool) -> None:
        """publish, route and one enqueue per queue (before the queues deliver it)."""
        names = list(queues)
        traced = [q for q in names if self.traces(q)]
        if self.pattern is not None and not traced:
            return
        self.record("publish", message, user=user, channel=channel, mandatory=mandatory)
        self.record("route", message, queues=names, routed=bool(names))
        for name in traced:
            self.record("enqueue", message, queue=name)
        if not names and mandatory:
            self.record("return", message, reply_code=312, reply_text="NO_ROUTE")

    def events_of(self, message_id_: str) -> list[Event]:
        return [e for e in self.ring if e["message_id"] == message_id_]

    def describe(self) -> dict[str, Any]:
        """What the ring holds and what it may hold (shown by GET /api/traces/{vhost})."""
        return {"enabled": True, "capacity": self.capacity,
                "queue": self.pattern.pattern if self.pattern is not None else None,
                "events": len(self.ring), "evicted": self.evicted,
                "started": round(self.started, 3), "subscribers": len(self.subscribers)}


# Why a queue drops a message (dead_letter's reasons) -> the event recorded.
_DROP_EVENTS = {"expired": "expire", "maxlen": "drop", "delivery_limit": "drop"}


def dropped(tracer: Tracer, queue: str, message: Message, reason: str,
            dead_letter_exchange: str | None) -> None:
    """A queue let ``message`` go dead (``Queue.drop``, ``Queue.refuse``)."""
    event = _DROP_EVENTS.get(reason)
    if event is not None:  # "rejected": the channel recorded the reject itself
        tracer.queue_event(event, queue, message, reason=reason)
    if dead_letter_exchange is not None:
        tracer.queue_event("dead-letter", queue, message, reason=reason,
                           dead_letter_exchange=dead_letter_exchange)


def message_id(message: Message) -> str | None:
    try:
        value = message.properties.message_id
    except ValueError:
        return None
    return str(value) if value is not None else None
