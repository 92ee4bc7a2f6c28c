"""Delayed delivery: scheduling a message on a delayed exchange, keeping it, releasing it.

Theory of operation
-------------------
``exchanges/delayed.py`` says which exchanges delay and by how much; this is the broker's
side (what the plugin's ``rabbit_delayed_message`` gen_server does, without its weak
points):

* **Storage.** Each delayed exchange owns one store queue id (a queue definition named
  ``amq.delayed-<exchange>``, which clients cannot declare and ``Broker.recover`` hands
  back here, not to the queues). A scheduled message is an entry of it keyed by its due
  time (``delayed.due_key``), recorded in the same batch as everything else of that loop
  turn, so the index and the message are one write; for a durable exchange the publisher's
  confirm waits for that commit (``HELD``). A transient exchange's entries are transient
  (dropped at the next start, with the orphan definition). The plugin stores every message
  of the exchange alike, persistent or not; so does Leveret.
* **No index in memory.** The store's key order is due order: the next message due is the
  first entry, and a restart reads one counter (``queue_stats``) per exchange, not the
  messages. What is kept in memory per exchange is O(1): the count (``messages_delayed``),
  the time its one timer is set for, and the keys released but not yet committed (at most
  a few batches).
* **Release.** The timer fires at the first due time; the due entries are read in batches
  of ``RELEASE_BATCH`` and each is routed through the exchange *as it is then* (bindings,
  alternate exchange) with its original routing key and CC keys, ``x-delay`` rewritten to
  minus the delay; its removal and the enqueues it causes are in the same batch, so a
  ``kill -9`` either releases it (once) or leaves it scheduled. A backlog (overdue
  messages after downtime) goes out at ``release_rate`` messages per second per exchange,
  not all at once. BCC keys are not kept (they are stripped before scheduling).
* **mandatory** is judged at publish time against the bindings then: a basic.return (and
  no scheduling) only if the message could go nowhere now; the plugin returns every
  delayed message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from leveret.broker import publishing
from leveret.broker.publish_props import routing_keys
from leveret.exchanges import delayed
from leveret.exchanges.exchange import ROUTING_TYPES
from leveret.model.errors import ChannelError
from leveret.model.message import Message
from leveret.model.properties import decode_properties, encode_properties
from leveret.persistence.commit_stats import Histogram
from leveret.persistence.store import QueueDef, StoredEntry

if TYPE_CHECKING:
    import asyncio

    from leveret.broker.publishing import Origin, Published
    from leveret.broker.vhost import VirtualHost
    from leveret.exchanges import Exchange
    from leveret.model.object_stats import ExchangeCounters
    from leveret.persistence.group_commit import GroupCommit

log = logging.getLogger(__name__)

#: The store queue of exchange ``x`` is named ``STORE_PREFIX + x`` (LavinMQ's name for its
#: internal queue); the argument tells it from anything else.
STORE_PREFIX = "amq.delayed-"
STORE_MARK = "x-delayed-store"
#: Entries read and released per timer turn: a loop turn stays short under a backlog.
RELEASE_BATCH = 500
#: Entries read from the store at a time while releasing: from the first size, doubling
#: while all are due, to the second. A timer firing often finds few due, and reading (and
#: decoding) a batch of undue ones each time would cost more than releasing.
READ_FIRST, READ_CHUNK = 4, 128
#: A timer fires at most this often (s): messages due within it go out together, a few ms
#: late at worst, instead of one loop turn and one store read per due millisecond.
FIRE_GAP = 0.004
#: Messages released per second per exchange at most (``Config.delayed_release_rate``):
#: above the 10,000 due per second a busy schedule sees, below a flood after downtime.
DEFAULT_RELEASE_RATE = 20_000
#: Seconds a message was released after its due time (Prometheus): milliseconds when all is
#: well, up to hours for what fell due while the node was down.
LATENESS_BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0, 300.0, 3600.0)


def check_declaration(type_: str, arguments: dict[str, object]) -> None:
    """A new delayed exchange's arguments, as the plugin checks them (every front door):
    ``ChannelError`` 406, or ``ConnectionError_`` 503 for an unknown ``x-delayed-type``."""
    delayed.validate(type_, arguments, ROUTING_TYPES)


def is_store(definition: QueueDef) -> bool:
    """Is this stored queue definition a delayed exchange's store (not a queue)?"""
    return definition.name.startswith(STORE_PREFIX) and definition.arguments.get(STORE_MARK) is True


def _now_ms() -> int:
    return int(time.time() * 1000)


class DelayedExchange:
    """One delayed exchange's schedule: its store id and O(1) state (see the module doc).
    (An extension type when compiled, broker/delayed.pxd: a publish reads and writes these
    fields as C.)"""

    def __init__(self, exchange: Exchange, qid: int, delays: Delays) -> None:
        self.exchange = exchange
        self.qid = qid
        self.delays = delays
        self.durable: bool = exchange.durable
        self.count = 0  # messages scheduled (messages_delayed)
        self.released = 0  # messages released since start
        self.timer: asyncio.TimerHandle | None = None
        self.timer_due: int | None = None  # ms the timer is set for
        self.releasing: set[int] = set()  # released, removal not yet committed
        # Every committed key below it is released: reads start there, not at the head.
        self.read_from = 0
        # Per batch not yet committed, the lowest key scheduled in it (reads cannot see
        # those yet, so the cursor stays at or below them): one or two entries, never per
        # message.
        self.floors: dict[int, int] = {}

    def take_dead_letter(self, message: Message) -> bool:
        """A message dead-lettered to this exchange: scheduled if its ``x-delay`` is
        positive (a released one's is negative, so it is not delayed twice)."""
        found = delayed.find_delay(message.raw_properties)
        delay = found[0] if found is not None else delayed.delay_of(message.headers)
        if delay <= 0 or self.delays.by_name.get(self.exchange.name) is not self:
            return False
        self.delays.schedule(self, message, delay)
        return True


@dataclass(frozen=True)
class Scheduled:
    """One scheduled message, as the management API lists it."""

    key: int
    due_ms: int
    message: Message


class Delays:
    """The delayed exchanges of one vhost (``vhost.delays``)."""

    def __init__(self, vhost: VirtualHost, log: GroupCommit,
                 clock: Callable[[], int] = _now_ms) -> None:
        self.vhost = vhost
        self.log = log
        self.clock = clock
        self.release_rate = DEFAULT_RELEASE_RATE
        # Release lateness; the broker gives every vhost's schedule the same one.
        self.lateness = Histogram(LATENESS_BOUNDS)
        self.by_name: dict[str, DelayedExchange] = {}
        # Low bits of the keys; starting at the next message id keeps them from repeating
        # the keys of messages stored before a restart (each scheduled message takes an id).
        self._counter = log.next_msg_id

    # -- exchanges come and go --------------------------------------------------------

    def declared(self, exchange: Exchange) -> None:
        """A new exchange: give it a store if it delays."""
        if not delayed.is_delayed(exchange.type, exchange.arguments):
            return
        qid = self.log.put_queue(QueueDef(self.vhost.name, STORE_PREFIX + exchange.name, True,
                                          False, {STORE_MARK: True}))
        exchange.delayed = self.by_name[exchange.name] = DelayedExchange(exchange, qid, self)

    def recovered(self, definition: QueueDef) -> int:
        """A store found at startup: back to its exchange (or dropped with it); its count."""
        name = definition.name[len(STORE_PREFIX):]
        exchange = self.vhost.exchanges.get(name)
        if exchange is None or not delayed.is_delayed(exchange.type, exchange.arguments):
            self.log.delete_queue(self.vhost.name, definition.name, definition.qid)
            return 0
        dx = exchange.delayed = self.by_name[name] = DelayedExchange(exchange, definition.qid,
                                                                     self)
        dx.count = self.log.queue_stats(definition.qid).count
        if dx.count:
            self._arm(dx, self.clock())  # the first read finds when the head is due
        return dx.count

    def deleted(self, exchange: Exchange) -> None:
        """The exchange is gone: so are its scheduled messages."""
        dx = self.by_name.get(exchange.name)
        if dx is None or dx.exchange is not exchange:
            return
        del self.by_name[exchange.name]
        self._disarm(dx)
        dx.count = 0
        self.log.delete_queue(self.vhost.name, STORE_PREFIX + exchange.name, dx.qid)

    def close(self) -> None:
        for dx in self.by_name.values():
            self._disarm(dx)

    # -- scheduling ----------------------------------------------------------------------

    def publish(self, message: Message, extra_routing_keys: tuple[str, ...], mandatory: bool,
                counters: ExchangeCounters | None, origin: Origin | None) -> Published:
        """basic.publish to a delayed exchange (``publishing.basic_publish`` hands it here).

        Without a positive ``x-delay`` it is an ordinary publish; with one, the exchange's
        checks (403 internal; it exists) are made now, and ``mandatory`` is judged against
        the bindings now (routing only then: where it goes is decided at release).
        """
        dx = self.by_name[message.exchange]
        delay = delayed.raw_delay(message.raw_properties)
        if delay is None:  # a table the walk does not read: decode it
            delay = delayed.delay_of(message.headers)  # ValueError: the caller's to map
        if delay <= 0:
            return publishing.basic_publish(self.vhost, message, extra_routing_keys, mandatory,
                                            counters, origin,
                                            self.vhost.route(message, extra_routing_keys))
        if dx.exchange.internal:
            self.vhost.check_not_internal(dx.exchange)
        if counters is not None:
            counters.publish += 1
        if mandatory and not self.vhost.route(message, extra_routing_keys):
            if counters is not None:
                counters.return_unroutable += 1
            return publishing.UNROUTED
        return publishing.HELD if self.schedule(dx, message, delay) else publishing.ACCEPTED

    def schedule(self, dx: DelayedExchange, message: Message, delay: int) -> bool:
        """Keep ``message`` until ``delay`` ms from now; true if its confirm waits for a
        commit (a durable exchange)."""
        key = delayed.due_key(self.clock() + delay, self._counter)
        self._counter += 1
        log = self.log
        log.enqueue(dx.qid, key, message, not dx.durable)
        dx.count += 1
        if key < dx.read_from:  # the wall clock went back
            dx.read_from = key
        batch = log.batch + 1  # the batch it goes out in
        floors = dx.floors
        floor = floors.get(batch)
        if floor is None:
            floors[batch] = key
            self._watch(dx, batch)
        elif key < floor:
            floors[batch] = key
        due = delayed.due_of(key)
        if dx.timer_due is None or due < dx.timer_due:
            self._arm(dx, due)
        return dx.durable and log.deferred

    def _watch(self, dx: DelayedExchange, batch: int) -> None:
        """``_committed`` once ``batch`` is on disk. (The closure is made here, once a
        batch: compiled, a function with a closure allocates its cell on every call.)"""
        self.log.after_commit(lambda ok: self._committed(dx, batch))

    def _committed(self, dx: DelayedExchange, batch: int) -> None:
        """The batch holding some scheduled messages is on disk: now they can be read; if
        one is due before the timer, fire earlier."""
        key = dx.floors.pop(batch, None)
        if key is not None and self.by_name.get(dx.exchange.name) is dx:
            due = delayed.due_of(key)
            if dx.timer_due is None or due < dx.timer_due:
                self._arm(dx, due)

    # -- the timer ------------------------------------------------------------------------

    def _arm(self, dx: DelayedExchange, due: int, *, after: float | None = None) -> None:
        loop = self.log.loop
        if loop is None:
            return  # no event loop (the sans-IO core's tests): release_due is called
        self._disarm(dx)
        wait = after if after is not None else max(0.0, (due - self.clock()) / 1000)
        dx.timer_due = due
        dx.timer = loop.call_later(wait, self._fire, dx)

    def _disarm(self, dx: DelayedExchange) -> None:
        if dx.timer is not None:
            dx.timer.cancel()
        dx.timer = dx.timer_due = None

    def _fire(self, dx: DelayedExchange) -> None:
        dx.timer = dx.timer_due = None
        if self.by_name.get(dx.exchange.name) is not dx:
            return
        try:
            released, next_due = self.release_due(dx)
        except Exception:  # never let a bad record stop every later release
            log.exception("releasing delayed messages of %s", dx.exchange)
            released, next_due = 0, self.clock() + 1000
        if released >= RELEASE_BATCH:  # a backlog: the next batch at the release rate
            self._arm(dx, self.clock(), after=released / max(1, self.release_rate))
        elif next_due is not None:
            self._arm(dx, next_due, after=max(FIRE_GAP, (next_due - self.clock()) / 1000))

    def release_due(self, dx: DelayedExchange, now: int | None = None,
                    limit: int = RELEASE_BATCH) -> tuple[int, int | None]:
        """Release up to ``limit`` messages due by ``now``; (how many, when the next is due
        as far as is known: None if nothing is scheduled)."""
        now = self.clock() if now is None else now
        floor = min(dx.floors.values()) if dx.floors else None
        position = dx.read_from if floor is None else min(dx.read_from, floor)
        next_due: int | None = None
        released = 0
        keys: list[int] = []
        chunk = READ_FIRST
        while next_due is None:
            want = min(chunk, limit - released + 1)
            chunk = min(chunk * 2, READ_CHUNK)
            entries = self.log.read_queue(dx.qid, position, want)
            for entry in entries:
                if entry.seq in dx.releasing:
                    position = entry.seq + 1
                    continue
                due = delayed.due_of(entry.seq)
                if due > now or released >= limit:
                    next_due = due
                    break
                self._release(dx, entry)
                keys.append(entry.seq)
                released += 1
                position = entry.seq + 1
            if len(entries) < want:
                break
        dx.read_from = position if floor is None else min(position, floor)
        if keys:
            self._forget_when_committed(dx, keys)
        return released, next_due

    def _forget_when_committed(self, dx: DelayedExchange, keys: list[int]) -> None:
        """Released or cancelled ``keys`` leave ``releasing`` once their removal is on disk;
        if it failed they stay (their entries too): never released twice."""
        releasing = dx.releasing
        self.log.after_commit(lambda ok: releasing.difference_update(keys) if ok else None)

    def _release(self, dx: DelayedExchange, entry: StoredEntry) -> None:
        """Route one due message through its exchange as it is now, and forget it."""
        dx.releasing.add(entry.seq)
        dx.count -= 1
        dx.released += 1
        self.log.remove(dx.qid, entry.seq)
        self.lateness.observe(max(0, self.clock() - delayed.due_of(entry.seq)) / 1000)
        try:
            message, extra = released_message(entry.message)
            queues = self.vhost.route(message, extra)
        except (ChannelError, ValueError) as exc:
            log.warning("dropping a delayed message of %s: %s", dx.exchange, exc)
            return
        if queues:  # its key (if its exchange deduplicates) was checked when scheduled
            self.vhost.publish_routed(message, queues, deduplicate=False)

    # -- operators: list, cancel, release now ----------------------------------------------

    def listing(self, dx: DelayedExchange, limit: int, after: int = -1) -> list[Scheduled]:
        """The first ``limit`` committed scheduled messages by due time (those after the key
        ``after``: the next page)."""
        out = []
        first = min(dx.floors.values(), default=dx.read_from)  # (no starred min: compiled)
        start = max(after + 1, min(first, dx.read_from))
        for entry in self.log.read_queue(dx.qid, start, limit + len(dx.releasing)):
            if entry.seq not in dx.releasing:
                out.append(Scheduled(entry.seq, delayed.due_of(entry.seq), entry.message))
                if len(out) >= limit:
                    break
        return out

    def _committed_entry(self, dx: DelayedExchange, key: int) -> StoredEntry | None:
        if key in dx.releasing:
            return None
        found = self.log.read_entries(dx.qid, [key])
        return found[0] if found else None

    def cancel(self, dx: DelayedExchange, key: int) -> bool:
        """Drop one scheduled message (false: no such committed message)."""
        if self._committed_entry(dx, key) is None:
            return False
        dx.count -= 1
        dx.releasing.add(key)  # gone as far as listings are concerned
        self.log.remove(dx.qid, key)
        self._forget_when_committed(dx, [key])
        return True

    def cancel_all(self, dx: DelayedExchange) -> int:
        """Drop every scheduled message of the exchange; how many there were."""
        count, dx.count = dx.count, 0
        self.log.purge(dx.qid, 0)
        dx.read_from = 0
        self._disarm(dx)
        return count

    def release_now(self, dx: DelayedExchange, key: int) -> bool:
        """Release one scheduled message before its time (false: no such message)."""
        entry = self._committed_entry(dx, key)
        if entry is None:
            return False
        self._release(dx, entry)
        self._forget_when_committed(dx, [key])
        return True


def released_message(stored: Message) -> tuple[Message, tuple[str, ...]]:
    """The message as released (``x-delay`` negated) and its CC routing keys."""
    raw = stored.raw_properties
    extra: tuple[str, ...] = ()
    # (``find``, not ``in``: ``bytes in bytes`` formats and drops a TypeError each call)
    if raw.find(b"\x02CC") >= 0:  # CC keys are routing keys again (publish_props)
        headers = stored.headers or {}
        extra = routing_keys(headers) if "CC" in headers else ()
    found = delayed.find_delay(raw)
    if found is not None:
        delay, released = found
    else:  # a table the walk does not read: the slow way
        delay, released = delayed.delay_of(stored.headers), None
    if delay <= 0:
        return stored, extra
    if released is None:
        props = decode_properties(raw)
        props.headers = delayed.released_headers(props.headers or {}, delay)
        released = encode_properties(props)
    return Message(stored.exchange, stored.routing_key, released, stored.body), extra
