"""Message tracing: a capped ring of life events per vhost, on demand (issue 13).

Theory of operation
-------------------
RabbitMQ's firehose republishes every message to ``amq.rabbitmq.trace``, a
copy per event, at a large cost. Here tracing is a ``Tracer`` hung on the
vhost (``VirtualHost.tracer``) while someone asked for it, ``None``
otherwise: each place where a message's life moves on (publish in a channel,
delivery, settlement, a queue dropping it) tests that one attribute and does
nothing more when it is ``None``.

When on, each step appends one flat tuple to a ring of ``capacity`` records:
its kind, a timestamp (``now``, refreshed every ``CLOCK_TICK`` by a loop timer
while tracing is on: one float shared by the records of a millisecond, not a
clock call and a float per record, which measurably mattered), the message's property bytes (shared with the message,
not copied; the body is not kept), exchange, routing key, queue and the
step's details. Memory is bounded (the oldest records go first; ``evicted``
counts them) and shown by ``describe``. Records become the API's events
(dicts with ``event``, ``timestamp`` in seconds since the epoch,
``message_id``, ``exchange``, ``routing_key`` and the details) only when read:
a publish record reads as its ``publish``, ``route``, ``enqueue`` (one per
traced queue) and, if unroutable and mandatory, ``return`` events, all with
the same timestamp; an automatic-ack delivery as ``deliver`` and ``ack``. So
recording costs a tuple and a deque append per step, and decoding the
message id (``browse.ids_of``) is done by whoever asks. A ``queue`` pattern limits tracing to the queues it matches
(``re.search``, as policies match names): queue events of other queues are
not recorded, and a publish only if it reached a matching queue.

Subscribers (the SSE stream) are callables fed each event as it is recorded;
they must not block (the HTTP side queues them with a bound).

It lives in ``queues`` (below ``broker``) because queues record their own
events (expire, dead-letter, drop) through it.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from leveret.exchanges.router import Step
from leveret.queues.browse import ids_of

if TYPE_CHECKING:
    from leveret.model.message import Message

# Records a ring may hold at most (each a tuple sharing the message's property bytes).
MAX_CAPACITY = 100_000
DEFAULT_CAPACITY = 10_000
# How often the timestamp records take is refreshed (their resolution), in seconds.
CLOCK_TICK = 0.001
EVENTS = ("publish", "route", "enqueue", "deliver", "ack", "nack", "reject", "expire",
          "dead-letter", "drop", "return")

# A record, one flat tuple (one allocation): (kind, timestamp, raw properties, exchange,
# routing key, queue, *details).
Record = tuple[Any, ...]
Event = dict[str, Any]
Subscriber = Callable[[Event], None]


class Named(Protocol):
    """What a publish record takes of a queue it reached: its name."""

    @property
    def name(self) -> str: ...

# Detail names of each record kind, in the order its tuple holds them.
_DETAILS: dict[str, tuple[str, ...]] = {
    "publish": ("user", "channel", "mandatory", "confirm", "queues", "traced", "steps"),
    "deliver": ("consumer_tag", "redelivered", "channel", "user", "ack_required"),
    "ack": ("channel", "consumer_tag", "requeue"),  # requeue: None, not shown
    "nack": ("channel", "consumer_tag", "requeue"),
    "reject": ("channel", "consumer_tag", "requeue"),
    "requeue": ("channel", "consumer_tag", "reason"),  # read as a "nack" with requeue true
    "expire": ("reason",),
    "drop": ("reason",),
    "dead-letter": ("reason", "dead_letter_exchange"),
}
_now = time.time


class Tracer:
    __slots__ = ("_timer", "capacity", "evicted", "now", "pattern", "ring", "started",
                 "subscribers")

    def __init__(self, capacity: int = DEFAULT_CAPACITY, queue: str | None = None) -> None:
        """``ValueError`` for a capacity out of range or a pattern that is not a regex."""
        if not 1 <= capacity <= MAX_CAPACITY:
            raise ValueError(f"capacity must be between 1 and {MAX_CAPACITY}")
        self.capacity = capacity
        try:
            self.pattern = re.compile(queue) if queue else None
        except re.error as exc:
            raise ValueError(f"queue is not a regular expression: {exc}") from None
        self.ring: deque[Record] = deque(maxlen=capacity)
        self.evicted = 0
        self.started = self.now = time.time()
        self.subscribers: list[Subscriber] = []
        self._timer: asyncio.TimerHandle | None = None

    def start_clock(self, loop: asyncio.AbstractEventLoop, on: Callable[[], bool]) -> None:
        """Refresh ``now`` every ``CLOCK_TICK`` while ``on()`` (this tracer is the vhost's)."""
        def tick() -> None:
            if on():
                self.now = _now()
                self._timer = loop.call_later(CLOCK_TICK, tick)
            else:
                self._timer = None
        tick()

    def stop_clock(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def traces(self, queue: str) -> bool:
        pattern = self.pattern
        return pattern is None or pattern.search(queue) is not None

    def _add(self, record: Record) -> None:
        """Append ``record``; the hooks below inline this (the cost of tracing on)."""
        ring = self.ring
        if len(ring) == self.capacity:
            self.evicted += 1
        ring.append(record)
        if self.subscribers:
            self._feed(record)

    def _feed(self, record: Record) -> None:
        for event in expand(record, {}):
            for subscriber in self.subscribers:
                subscriber(event)

    def queue_event(self, kind: str, queue: str, message: Message, *details: Any) -> None:
        """A step in one queue's life of the message (``_DETAILS[kind]``, in order)."""
        if self.pattern is None or self.pattern.search(queue) is not None:
            self._add((kind, self.now, message.raw_properties, message.exchange,
                       message.routing_key, queue, *details))

    # The three hooks below run per message while tracing is on: explicit arguments, one
    # flat tuple each, the append inlined (what tracing costs when on: bench/trace_cost.py).

    def delivered(self, queue: str, message: Message, consumer_tag: str, redelivered: bool,
                  channel: int | None, user: str | None, ack_required: bool) -> None:
        if self.pattern is not None and self.pattern.search(queue) is None:
            return
        ring = self.ring
        if len(ring) == self.capacity:
            self.evicted += 1
        record = ("deliver", self.now, message.raw_properties, message.exchange,
                  message.routing_key, queue, consumer_tag, redelivered, channel, user,
                  ack_required)
        ring.append(record)
        if self.subscribers:
            self._feed(record)

    def settled(self, kind: str, queue: str, message: Message, channel: int | None,
                consumer_tag: str, requeue: bool | None) -> None:
        """ack (``requeue`` None), nack or reject of one delivery."""
        if self.pattern is not None and self.pattern.search(queue) is None:
            return
        ring = self.ring
        if len(ring) == self.capacity:
            self.evicted += 1
        record = (kind, self.now, message.raw_properties, message.exchange,
                  message.routing_key, queue, channel, consumer_tag, requeue)
        ring.append(record)
        if self.subscribers:
            self._feed(record)

    def published(self, message: Message, queues: Sequence[Named], user: str,
                  channel: int | None, mandatory: bool, confirm: bool,
                  steps: tuple[Step, ...] | None = None) -> None:
        """publish, route and one enqueue per traced queue (before the queues deliver it).

        ``channel`` None: published over HTTP. ``steps``: the exchanges the message went
        through (``exchanges.router.explain``); None for the default exchange, whose one
        step the reader rebuilds from ``queues``.
        """
        # Tuples of strings only: the garbage collector stops tracking such records, so a
        # ring of them is not traversed over and over as it churns.
        names = (queues[0].name,) if len(queues) == 1 else tuple([q.name for q in queues])
        traced = names
        if self.pattern is not None:
            traced = tuple(q for q in names if self.pattern.search(q) is not None)
            if not traced:
                return
        ring = self.ring
        if len(ring) == self.capacity:
            self.evicted += 1
        record = ("publish", self.now, message.raw_properties, message.exchange,
                  message.routing_key, "", user, channel, mandatory, confirm, names,
                  traced, steps)
        ring.append(record)
        if self.subscribers:
            self._feed(record)

    def requeued(self, queue: str, message: Message, channel: int | None, consumer_tag: str,
                 reason: str) -> None:
        """An unacked delivery went back to its queue without a nack: the channel or
        connection closed, basic.recover, or an HTTP get that requeues."""
        self.queue_event("requeue", queue, message, channel, consumer_tag, reason)

    def events(self) -> Iterator[Event]:
        """Every event in the ring, oldest first."""
        ids: dict[bytes, str | None] = {}
        for record in list(self.ring):
            yield from expand(record, ids)

    def events_of(self, message_id_: str) -> list[Event]:
        return [e for e in self.events() if e["message_id"] == message_id_]

    def describe(self) -> dict[str, Any]:
        """What the ring holds and what it may hold (shown by GET /api/traces/{vhost})."""
        return {"enabled": True, "capacity": self.capacity,
                "queue": self.pattern.pattern if self.pattern is not None else None,
                "records": len(self.ring), "evicted": self.evicted,
                "started": round(self.started, 3), "subscribers": len(self.subscribers)}


def expand(record: Record, ids: dict[bytes, str | None]) -> Iterator[Event]:
    """The API's events of one record (see the module docstring); ``ids`` caches ids."""
    kind, ts, props, exchange, routing_key, queue = record[:6]
    details = record[6:]
    if props in ids:
        mid = ids[props]
    else:
        mid = ids[props] = _message_id(props)
    base = {"timestamp": round(ts, 6), "message_id": mid, "exchange": exchange,
            "routing_key": routing_key}
    named = dict(zip(_DETAILS[kind], details))
    if kind == "publish":
        queues, traced, steps = named.pop("queues"), named.pop("traced"), named.pop("steps")
        named["via"] = "amqp" if named["channel"] is not None else "http"
        yield {"event": "publish", **base, **named}
        yield {"event": "route", **base, "queues": list(queues), "routed": bool(queues),
               **_route_details(exchange, queues, steps)}
        for name in traced:
            yield {"event": "enqueue", **base, "queue": name}
        if not queues and named["mandatory"]:
            yield {"event": "return", **base, "reply_code": 312, "reply_text": "NO_ROUTE"}
        return
    if kind == "requeue":
        yield {"event": "nack", **base, "queue": queue, **named, "requeue": True}
        return
    if kind == "ack":
        del named["requeue"]
    yield {"event": kind, **base, "queue": queue, **named}
    if kind == "deliver" and not named["ack_required"]:
        yield {"event": "ack", **base, "queue": queue, "channel": named["channel"],
               "consumer_tag": named["consumer_tag"], "auto": True}


def _route_details(exchange: str, queues: tuple[str, ...],
                   steps: tuple[Step, ...] | None) -> dict[str, Any]:
    """A route event's exchange chain, matched bindings, alternate exchange and outcome."""
    if steps is None:  # the default exchange: each queue is bound by its name
        steps = ((exchange, "published", tuple(("queue", q) for q in queues)),)
    alternate = next((name for name, via, _ in steps if via == "alternate-exchange"), None)
    return {
        "exchanges": [{"name": name, "via": via} for name, via, _ in steps],
        "bindings": [{"source": name, "destination": dest, "destination_type": kind}
                     for name, _, matched in steps for kind, dest in matched],
        "alternate_exchange": alternate,
        "unroutable": not queues,
    }


def _message_id(props: bytes) -> str | None:
    ids = ids_of(props)
    return ids[1] if ids is not None else None


# Why a queue drops a message (dead_letter's reasons) -> the event recorded.
_DROP_EVENTS = {"expired": "expire", "maxlen": "drop", "delivery_limit": "drop"}


def dropped(tracer: Tracer, queue: str, message: Message, reason: str,
            dead_letter_exchange: str | None) -> None:
    """A queue let ``message`` go dead (``Queue.drop``, ``Queue.refuse``)."""
    event = _DROP_EVENTS.get(reason)
    if event is not None:  # "rejected": the channel recorded the reject itself
        tracer.queue_event(event, queue, message, reason)
    if dead_letter_exchange is not None:
        tracer.queue_event("dead-letter", queue, message, reason, dead_letter_exchange)
