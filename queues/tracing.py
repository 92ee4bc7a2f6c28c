"""Message tracing: a capped ring of life events per vhost, on demand.

Theory of operation
-------------------
RabbitMQ's firehose republishes every message to ``amq.rabbitmq.trace``, a
copy per event, at a large cost. Here tracing is a ``Tracer`` hung on the
vhost (``VirtualHost.tracer``) while someone asked for it, ``None``
otherwise: each place where a message's life moves on (publish in a channel,
delivery, settlement, a queue dropping it) tests that one attribute and does
nothing more when it is ``None``.

When on, each step appends one flat tuple to a ring of ``capacity`` records:
its kind, a sequence number, a timestamp, the message's property bytes (shared
with the message, not copied; the body is not kept), exchange, routing key,
queue and the step's details. Memory is bounded (the oldest records go first;
``evicted`` counts them, from the sequence numbers) and shown by ``describe``.

What tracing on costs is what a step costs, so a step is made cheap
(``bench/trace_cost.py``, ``bench/icount.py --trace``): the channel builds the
tuple for a delivery or an ack itself and hands it to ``Tracer.record``, which
is the ring's own ``append`` (a C call) unless a queue filter needs a look at
it (live readers never do); the timestamp is ``now``, one float refreshed every
``CLOCK_TICK`` by a loop timer, not a clock call and a float per record. Records
become the API's events (dicts with ``event``, ``timestamp`` in seconds since the
epoch, ``message_id``, ``exchange``, ``routing_key`` and the details) only when
read: a publish record reads as its ``publish``, ``route`` (with the exchange
chain, ``exchanges.router.explain``), ``enqueue`` (one per traced queue) and, if
unroutable and mandatory, ``return`` events, all with the same timestamp; a
dead-lettered copy's record as the ``route`` through its dead-letter exchange and
an ``enqueue`` per queue it reached (both with ``dead_lettered_from``), so a
message's trace goes on into the next queue; an
automatic-ack delivery as ``deliver`` and ``ack``. Decoding the message id
(``browse.ids_of``) is done by whoever asks. A ``queue`` pattern limits tracing
to the queues it matches (searched, as policies match names, but by RE2 in linear time:
``model/name_pattern.py``; it is tested on every traced step): queue events
of other queues are not recorded, and a publish only if it reached a matching
queue.

Live readers (the SSE streams, ``management_ui/sse.py``) read the ring itself, each
from the position it has reached (``appended`` counts every record kept): recording
does nothing per reader. ``on_records``, when set, is called by the clock's tick when
records came since the last tick (at most once per ``CLOCK_TICK``), to wake them.

It lives in ``queues`` (below ``broker``) because queues record their own
events (expire, dead-letter, drop) through it.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from leveret.exchanges.router import Step
from leveret.model.name_pattern import NamePattern, PatternError, compile_pattern
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

# A record, one flat tuple (one allocation): (kind, sequence number, timestamp, raw
# properties, exchange, routing key, queue, *details); a publish's queue is "" and its
# details end with the names of the queues it reached (at _QUEUES) and its route steps.
Record = tuple[Any, ...]
Event = dict[str, Any]
_QUEUE = 6
_QUEUES = 11


class Named(Protocol):
    """What a publish record takes of a queue it reached: its name."""

    @property
    def name(self) -> str: ...

# Detail names of each record kind, in the order its tuple holds them.
_DETAILS: dict[str, tuple[str, ...]] = {
    "publish": ("user", "channel", "mandatory", "confirm", "queues", "steps"),
    "deliver": ("consumer_tag", "redelivered", "channel", "user", "ack_required"),
    "ack": ("channel", "consumer_tag", "requeue"),  # requeue: None, not shown
    "nack": ("channel", "consumer_tag", "requeue"),
    "reject": ("channel", "consumer_tag", "requeue"),
    "requeue": ("channel", "consumer_tag", "reason"),  # read as a "nack" with requeue true
    "expire": ("reason",),
    "drop": ("reason",),
    "dead-letter": ("reason", "dead_letter_exchange"),
    # the dead-lettered copy routed on: read as a "route" and an "enqueue" per queue
    "dead-letter-route": ("reason", "queues", "steps"),
}
_now = time.time


class Tracer:
    """A vhost's trace ring. ``record`` appends one record (the layout above); call sites on
    the hot path build the tuple themselves and call it: while there is no queue filter it
    is the ring's own ``append``, so tracing a step costs one tuple, one ``next(seq)`` and
    one C call, however many streams read the ring. The methods below build records for everyone else."""

    __slots__ = ("_last_seen", "_skipped", "_skipped_at_last", "_timer", "capacity", "live",
                 "now", "on_records", "pattern", "readers", "record", "ring", "seq", "started")

    def __init__(self, capacity: int = DEFAULT_CAPACITY, queue: str | None = None) -> None:
        """``ValueError`` for a capacity out of range or a pattern that is not a regex."""
        if not 1 <= capacity <= MAX_CAPACITY:
            raise ValueError(f"capacity must be between 1 and {MAX_CAPACITY}")
        self.capacity = capacity
        try:
            self.pattern = compile_pattern(queue, caseless=False) if queue else None
        except PatternError as exc:
            raise ValueError(f"queue is not a regular expression: {exc}") from None
        self.ring: deque[Record] = deque(maxlen=capacity)
        self.seq = itertools.count(1)  # numbers records: how many the ring let go (evicted)
        self._skipped = self._skipped_at_last = 0  # records the queue filter turned away
        self.started = self.now = time.time()
        self.readers = 0  # live streams reading the ring (shown by describe)
        self.on_records: Callable[[], None] | None = None
        self.live: object | None = None  # what the HTTP side keeps while readers are on
        self._last_seen = 0  # the newest record's number at the last tick
        self._timer: asyncio.TimerHandle | None = None
        self.record: Callable[[Record], None] = (
            self.ring.append if self.pattern is None else self._record_checked)

    @property
    def appended(self) -> int:
        """Records ever kept (the ring holds the last ``len(ring)`` of them)."""
        ring = self.ring
        return ring[-1][1] - self._skipped_at_last if ring else 0

    @property
    def evicted(self) -> int:
        return self.appended - len(self.ring)

    def start_clock(self, loop: asyncio.AbstractEventLoop, on: Callable[[], bool]) -> None:
        """Refresh ``now`` every ``CLOCK_TICK`` while ``on()`` (this tracer is the vhost's)."""
        def tick() -> None:
            if on():
                self.now = _now()
                ring, wake = self.ring, self.on_records
                if wake is not None and ring and ring[-1][1] != self._last_seen:
                    self._last_seen = ring[-1][1]
                    wake()
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

    def _record_checked(self, record: Record) -> None:
        """``record`` with a queue filter: a queue step of another queue, or a publish that
        reached none of the filter's queues, is not kept."""
        pattern = self.pattern
        if pattern is not None:
            if record[0] == "publish":
                keep = any(pattern.search(q) is not None for q in record[_QUEUES])
            elif record[0] == "dead-letter-route":  # from a traced queue, or into one
                keep = any(pattern.search(q) is not None
                           for q in (record[_QUEUE], *record[_QUEUE + 2]))
            else:
                keep = pattern.search(record[_QUEUE]) is not None
            if not keep:
                self._skipped += 1
                return
        self._skipped_at_last = self._skipped
        self.ring.append(record)

    def queue_event(self, kind: str, queue: str, message: Message, *details: Any) -> None:
        """A step in one queue's life of the message (``_DETAILS[kind]``, in order)."""
        self.record((kind, next(self.seq), self.now, message.raw_properties,
                     message.exchange, message.routing_key, queue, *details))

    def delivered(self, queue: str, message: Message, consumer_tag: str, redelivered: bool,
                  channel: int | None, user: str | None, ack_required: bool) -> None:
        self.record(("deliver", next(self.seq), self.now, message.raw_properties,
                     message.exchange, message.routing_key, queue, consumer_tag, redelivered,
                     channel, user, ack_required))

    def settled(self, kind: str, queue: str, message: Message, channel: int | None,
                consumer_tag: str, requeue: bool | None) -> None:
        """ack (``requeue`` None), nack or reject of one delivery."""
        self.record((kind, next(self.seq), self.now, message.raw_properties, message.exchange,
                     message.routing_key, queue, channel, consumer_tag, requeue))

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
        self.record(("publish", next(self.seq), self.now, message.raw_properties,
                     message.exchange, message.routing_key, "", user, channel, mandatory,
                     confirm, names, steps))

    def dead_lettered(self, message: Message, queues: Sequence[Named], from_queue: str,
                      reason: str, steps: tuple[Step, ...] | None) -> None:
        """The dead-lettered copy of a message that left ``from_queue``, routed through its
        dead-letter exchange into ``queues``: so a trace follows it into the next queue."""
        self.record(("dead-letter-route", next(self.seq), self.now, message.raw_properties,
                     message.exchange, message.routing_key, from_queue, reason,
                     tuple([q.name for q in queues]), steps))

    def requeued(self, queue: str, message: Message, channel: int | None, consumer_tag: str,
                 reason: str) -> None:
        """An unacked delivery went back to its queue without a nack: the channel or
        connection closed, basic.recover, or an HTTP get that requeues."""
        self.queue_event("requeue", queue, message, channel, consumer_tag, reason)

    def events(self) -> Iterator[Event]:
        """Every event in the ring, oldest first."""
        ids: dict[bytes, str | None] = {}
        for record in list(self.ring):
            yield from expand(record, ids, self.pattern)

    def events_of(self, message_id_: str) -> list[Event]:
        return [e for e in self.events() if e["message_id"] == message_id_]

    def describe(self) -> dict[str, Any]:
        """What the ring holds and what it may hold (shown by GET /api/traces/{vhost})."""
        return {"enabled": True, "capacity": self.capacity,
                "queue": self.pattern.pattern if self.pattern is not None else None,
                "records": len(self.ring), "evicted": self.evicted,
                "started": round(self.started, 3), "subscribers": self.readers}


def expand(record: Record, ids: dict[bytes, str | None],
           pattern: NamePattern | None = None) -> Iterator[Event]:
    """The API's events of one record (see the module docstring); ``ids`` caches ids, and
    ``pattern`` (the queue filter) says which of a publish's queues get an enqueue event."""
    kind, _seq, ts, props, exchange, routing_key, queue = record[:7]
    details = record[7:]
    if props in ids:
        mid = ids[props]
    else:
        mid = ids[props] = _message_id(props)
    base = {"timestamp": round(ts, 6), "message_id": mid, "exchange": exchange,
            "routing_key": routing_key}
    named = dict(zip(_DETAILS[kind], details))
    if kind == "publish":
        queues, steps = named.pop("queues"), named.pop("steps")
        traced = queues if pattern is None else [q for q in queues if pattern.search(q)]
        named["via"] = "amqp" if named["channel"] is not None else "http"
        yield {"event": "publish", **base, **named}
        yield {"event": "route", **base, "queues": list(queues), "routed": bool(queues),
               **_route_details(exchange, queues, steps)}
        for name in traced:
            yield {"event": "enqueue", **base, "queue": name}
        if not queues and named["mandatory"]:
            yield {"event": "return", **base, "reply_code": 312, "reply_text": "NO_ROUTE"}
        return
    if kind == "dead-letter-route":
        queues, steps = named.pop("queues"), named.pop("steps")
        yield {"event": "route", **base, "queues": list(queues), "routed": bool(queues),
               "dead_lettered_from": queue, "reason": named["reason"],
               **_route_details(exchange, queues, steps)}
        for name in queues:
            if pattern is None or pattern.search(name):
                yield {"event": "enqueue", **base, "queue": name, "dead_lettered_from": queue}
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
