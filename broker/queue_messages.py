"""Management operations on a queue's ready messages: redrive, move, delete.

Theory of operation
-------------------
RabbitMQ needs the shovel plugin and hand-typed names to get dead letters
home. Here a selection of ready messages, either the first ``count`` (taken
from the head through the ready store's ``pop``, so a paged queue reads its
tail in as a consumer would) or given ``positions`` (as ``browse.peek``
numbers them, in memory or paged out: a paged-out one is read from the store
and taken out of the queue's tail, ``ready.Tail.take``), is:

* **redriven**: republished to the exchange and routing keys recorded in
  the message's first (newest) ``x-death`` entry, properties and body
  unchanged (x-death included, as a shovel would), then removed;
* **moved** to another queue of the vhost (enqueued there directly, as a
  publish through the default exchange would), then removed;

both through the broker's one publish operation (``publishing.basic_publish``), as a
publish without a channel: not traced, not paused by flow control;
* **deleted** (not dead-lettered: a purge of the selection).

Atomic per message: the enqueue into the destination and the removal from
the source are recorded in the same event-loop turn, so the group commit
writes them in one store transaction; a crash leaves the message in exactly
one of the two places. A message that cannot go (no x-death, exchange gone,
unroutable, refused by the destination's overflow, publish not permitted)
stays where it was, in its place, and is reported in ``skipped`` with the
reason.

Permissions are RabbitMQ's for the equivalent AMQP work: the HTTP routes
check ``read`` on the source queue (basic.get, queue.purge); redrive checks
``write`` on each origin exchange and move ``write`` on ``amq.default``
(basic.publish), here, per message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from leveret.broker.permissions import Access
from leveret.broker.publishing import Published, basic_publish
from leveret.broker.vhost import VirtualHost
from leveret.model.errors import ChannelError
from leveret.model.message import Message
from leveret.persistence.store import StoredEntry
from leveret.queues import browse
from leveret.queues.entry import QueueEntry
from leveret.queues.queue import Queue
from leveret.queues.ready import Tail

# Skip reasons, as the API reports them.
NO_X_DEATH = "not_dead_lettered"
EXCHANGE_GONE = "exchange_not_found"
UNROUTABLE = "unroutable"
REFUSED = "refused"
ACCESS_REFUSED = "access_refused"
NOT_FOUND = "no_such_position"


@dataclass
class Outcome:
    """What an operation did: messages moved (or deleted), and those left, with why."""

    moved: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Selection:
    """The first ``count`` ready messages, or those at ``positions`` (``browse`` numbering)."""

    count: int = 0
    positions: tuple[int, ...] = ()


# A step: send one entry's message on (True) or say why not (a skip reason).
Step = Callable[[QueueEntry], "bool | str"]


def _apply(queue: Queue, selection: Selection, step: Step) -> Outcome:
    """Take the selected entries out of ``queue``, run ``step`` on each, put skipped ones back."""
    out = Outcome()
    store = queue.ready
    picked: list[tuple[int, QueueEntry]] = []
    tails: dict[int, Tail] = {}  # seq -> the tail each picked paged-out entry came from
    if selection.positions:
        wanted = set(selection.positions)
        at: dict[int, int] = {}
        for position, item in enumerate(browse.walk(queue, max(wanted) + 1)):
            if position in wanted:
                if isinstance(item, QueueEntry):
                    at[item.seq] = position
                elif isinstance(item, StoredEntry):  # paged out: taken out of the tail
                    tail = tails[item.seq] = store.tail_of(item)
                    tail.take(item.seq, len(item.message.body))
                    picked.append((position, _entry_of(item)))
        picked += [(at[e.seq], e) for e in store.take(list(at))]
        seen = {p for p, _ in picked}
        out.skipped.extend((p, NOT_FOUND) for p in sorted(wanted - seen))
    else:
        for position in range(max(selection.count, 0)):
            entry = store.pop()
            if entry is None:
                break
            picked.append((position, entry))
    picked.sort(key=lambda pe: pe[0])
    back: list[QueueEntry] = []
    log = queue.log
    for position, entry in picked:
        result = step(entry)
        if result is True:
            out.moved += 1
            if entry.stored and log is not None:
                log.remove(queue.qid, entry.seq, entry.message)  # same turn: same transaction
        else:
            out.skipped.append((position, str(result)))
            if entry.seq in tails:
                tails[entry.seq].untake(entry.seq, len(entry.message.body))  # still stored
            else:
                back.append(entry)
    for entry in back:
        store.requeue(entry)  # to its original place
    store.after_change()
    queue.release_flow()
    if back:
        queue.deliver_ready()
    out.skipped.sort()
    return out


def _entry_of(stored: StoredEntry) -> QueueEntry:
    """A paged-out entry as the queue would hold it once read back from its tail."""
    entry = QueueEntry(stored.seq, stored.message)
    entry.delivery_count = stored.delivery_count
    entry.stored = True
    if stored.expires_at:
        entry.expires_at = stored.expires_at
    return entry


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def origin(message: Message) -> tuple[str, list[str]] | None:
    """The exchange and routing keys of the newest ``x-death`` entry, if any."""
    try:
        headers = message.headers
    except ValueError:
        return None
    deaths = (headers or {}).get("x-death")
    if not isinstance(deaths, list) or not deaths or not isinstance(deaths[0], dict):
        return None
    first = deaths[0]
    keys = first.get("routing-keys")
    if "exchange" not in first or not isinstance(keys, list) or not keys:
        return None
    return _text(first["exchange"]), [_text(k) for k in keys]


def _sent(out: Published) -> bool | str:
    """A step's answer for what the publish did: refused when no queue took the message."""
    if not out.routed:
        return UNROUTABLE
    return out.stored or REFUSED


def redrive(vhost: VirtualHost, queue: Queue, access: Access, selection: Selection) -> Outcome:
    """Send dead-lettered messages back where their first x-death says they died from."""

    def step(entry: QueueEntry) -> bool | str:
        message = entry.message
        found = origin(message)
        if found is None:
            return NO_X_DEATH
        exchange, keys = found
        if exchange and exchange not in vhost.exchanges:
            return EXCHANGE_GONE
        try:
            access.check_publish(exchange)
            copy = Message(exchange, keys[0], message.raw_properties, message.body)
            return _sent(basic_publish(vhost, copy, tuple(keys[1:]), False, None, None))
        except ChannelError as exc:
            return ACCESS_REFUSED if exc.code == 403 else EXCHANGE_GONE
        except ValueError:
            return UNROUTABLE  # malformed properties: nothing routes it

    return _apply(queue, selection, step)


def move(vhost: VirtualHost, queue: Queue, destination: Queue, access: Access,
         selection: Selection) -> Outcome:
    """Move ready messages to ``destination``, unchanged (exchange and routing key kept).

    Raises 403 ``ChannelError`` without write on ``amq.default``."""
    access.check_publish("")
    moved = (destination,)
    return _apply(queue, selection, lambda entry: _sent(
        basic_publish(vhost, entry.message, (), False, None, None, moved)))


def delete(queue: Queue, selection: Selection) -> Outcome:
    """Remove ready messages without dead-lettering them (a purge of the selection)."""
    return _apply(queue, selection, lambda entry: True)
