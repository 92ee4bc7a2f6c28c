"""basic.publish in the broker model: route, enqueue, count, trace; one path for every front door.

Theory of operation
-------------------
``basic_publish`` is what RabbitMQ's channel does once a message is complete and
checked (``rabbit_channel`` ``handle_method(basic.publish)`` after its checks, then
``deliver_to_queues``): route it through its exchange (exchange-to-exchange bindings and
alternate exchanges are ``exchanges/router.py``'s; CC/BCC keys come in ``extra``), offer it
to every queue, and sum up the queues' ``PublishResult`` for the publisher:

* ``routed``: some queue was found (unroutable: the AMQP caller returns a mandatory one);
* ``stored``: some queue took it (redrive skips a message every queue refused);
* ``held``: a durable write was recorded, so a confirm (or an HTTP answer) waits for the
  commit: ``GroupCommit.committed`` for a caller that can await, ``GroupCommit.hold`` for a
  channel;
* ``refused``: a ``reject-publish`` queue refused it: a confirm is a nack, HTTP says 400.

Deduplication (``dedupe.py``, ``queues/dedupe.py``) hooks in here, so every front door
gets it: a duplicate counts as routed (no basic.return: its first copy was delivered) and
not stored, and is confirmed with an ack. Exchanges without a window cost one test of an
empty dict; queues without one, one attribute test each. The window is checked before the
queues are offered the message and the key remembered after, in the same call (no second
pass through here); its key is read before the message is routed, so that the window's
table slot for it is fetched from memory while the router works. Dead letters routed into
an exchange with a window are checked too: RabbitMQ's dead-lettering routes through the
exchange type (``rabbit_dead_letter`` ``publish`` calls ``rabbit_exchange:route``), where
the plugin's check lives, so a dead letter whose key the window holds is dropped (and
counted as a duplicate).

Every front door calls it: AMQP basic.publish (``amqp/publishing.py``), HTTP publish
(``management_ui/basic.py``), redrive and move (``queue_messages.py``), dead-lettering
(through the vhost, ``queues/dead_letter.py`` routes itself: its keys and cycles are its
own) and the aliveness check. What differs is the ``Origin``: who is named in the trace
and paused while a queue it fills is behind its consumers (flow control); None for the
broker's own moves, which are neither traced as publishes nor paused.

The hot path is AMQP's: the channel calls this with what it has (no object built per
message), the default exchange to an existing queue is one dictionary lookup, and the
common outcomes are shared constants, not a tuple built per message.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, NamedTuple, Protocol

from leveret.exchanges import router
from leveret.queues.entry import PublishResult

if TYPE_CHECKING:
    from collections.abc import Sequence

    from leveret.broker.dedupe import ExchangeDedupe
    from leveret.broker.vhost import VirtualHost
    from leveret.model.message import Message
    from leveret.model.object_stats import ExchangeCounters
    from leveret.queues.queue import Queue

__all__ = ["AwaitingOrigin", "Origin", "Published", "basic_publish"]

_ACCEPTED = PublishResult.ACCEPTED
_HELD = PublishResult.HELD
_REFUSED = PublishResult.REFUSED


class Origin(Protocol):
    """Who publishes: named in trace records, and paused while a queue it fills is behind."""

    @property
    def trace_user(self) -> str: ...

    @property
    def trace_channel(self) -> int | None:
        """The channel number; None over HTTP."""

    @property
    def trace_confirm(self) -> bool: ...

    def flow_wait(self, queue: Queue) -> None:
        """``queue`` is behind its consumers: wait until it calls ``flow_release``."""


class Published(NamedTuple):
    """What the queues made of one publish (see the module docstring)."""

    routed: bool
    stored: bool
    held: bool
    refused: bool


UNROUTED = Published(False, False, False, False)
ACCEPTED = Published(True, True, False, False)
HELD = Published(True, True, True, False)
DUPLICATE = Published(True, False, False, False)
DUPLICATE_HELD = Published(True, False, True, False)  # its first copy's commit is pending


def basic_publish(vhost: VirtualHost, message: Message, extra_routing_keys: tuple[str, ...],
                  mandatory: bool, counters: ExchangeCounters | None, origin: Origin | None,
                  queues: Sequence[Queue] | None = None, deduplicate: bool = True) -> Published:
    """Route ``message`` (plus its CC/BCC keys) and offer it to every queue it reaches.

    ``queues``: already routed (dead-lettering, a delayed release), so routing is skipped.
    ``deduplicate``: False for a delayed release, whose key was checked when it was
    scheduled (``_deduplicated``). Raises
    ``ChannelError`` (404 no exchange, 403 internal) and ``ValueError`` (properties that
    routing had to decode and could not): the caller maps them to its own reply.
    ``counters`` (the publishing channel's, for this exchange) are counted if given.
    """
    window: ExchangeDedupe | None = None  # (with the new key it found, ``window_key``)
    window_key: bytes | None = None
    expected = False  # the window's key read (``window_key``, None: no key) before routing
    if queues is None:
        # The default exchange to an existing queue, the commonest publish, without a call;
        # everything else (and every error) is VirtualHost.route's.
        queue = None if message.exchange or extra_routing_keys else vhost.queues.get(
            message.routing_key)
        if queue is not None:
            queues = (queue,)
        else:
            delays = vhost.delays.by_name
            if delays and message.exchange in delays:  # a delayed exchange (broker/delayed.py)
                windows = vhost.dedupe
                if windows and message.exchange in windows:  # deduplicated before scheduling
                    return _deduplicated(vhost, windows[message.exchange], message,
                                         extra_routing_keys, mandatory, counters, origin)
                return vhost.delays.publish(message, extra_routing_keys, mandatory, counters,
                                            origin)
            # A named exchange that takes publishes: routed by the (compiled) router, without
            # the vhost's frame; the default exchange's special cases and every error are
            # VirtualHost.route's.
            exchange = vhost.exchanges.get(message.exchange) if message.exchange else None
            if exchange is not None and not exchange.internal:
                if deduplicate:  # the window's test, made before routing instead of after
                    expected = True
                    windows = vhost.dedupe
                    if windows and message.exchange in windows:
                        # The key read first: its table slot comes from memory while the
                        # message is routed (at a million keys, a cache miss a publish).
                        window = windows[message.exchange]
                        window_key = window.expect(message)
                # Queues only: the router resolved the exchanges (no typing.cast: compiled,
                # it would be a call per publish).
                routed: Sequence[Queue] = router.route_message(  # type: ignore[assignment]
                    exchange, message, vhost.exchanges, extra_routing_keys)
                queues = routed
            else:
                queues = vhost.route(message, extra_routing_keys)
    if not expected:  # routed otherwise (or already): the key is read now
        windows = vhost.dedupe
        if windows and message.exchange in windows and deduplicate:
            window = windows[message.exchange]
            window_key = window.expect(message)
    if window is not None:  # checked here, remembered below
        if window_key is None:  # no key: not deduplicated
            window = None
        else:
            window_key = window.check_key(window_key)
            if not window_key:  # SEEN: a duplicate
                if counters is not None:
                    counters.publish += 1
                return DUPLICATE_HELD if window.pending else DUPLICATE
    tracer = vhost.tracer
    if tracer is not None and origin is not None:  # tracing off: this test is all it costs
        tracer.published(message, queues, origin.trace_user, origin.trace_channel, mandatory,
                         origin.trace_confirm,
                         vhost.explain_route(message, extra_routing_keys)
                         if message.exchange else None)
    if counters is not None:
        counters.publish += 1
    if not queues:
        if counters is not None:
            if mandatory:
                counters.return_unroutable += 1
            else:
                counters.drop_unroutable += 1
        return UNROUTED
    held = refused = stored = duplicate = False
    for queue in queues:
        if counters is not None:
            try:  # subscripts, not .get: no method call on the hot path
                counters.queues[queue] += 1
            except KeyError:
                counters.first_route(queue)
        dedupe = queue.dedupe
        key = None
        if dedupe is not None:  # a queue that holds one message per key (queues/dedupe.py)
            key = dedupe.key_of(message)
            if key is not None and dedupe.duplicate(key):
                duplicate = True
                continue
        result = queue.publish(message)
        if key is not None and dedupe is not None and result is not _REFUSED:
            dedupe.add(key)  # the message holds its key while it is in the queue
        if result is _ACCEPTED:
            stored = True
        elif result is _HELD:
            held = stored = True
        else:  # reject-publish overflow (queues/limits.py)
            refused = True
        if origin is not None and queue.behind():
            origin.flow_wait(queue)
    if window is not None and stored and window_key:  # its key is in the window now
        window.admit(window_key)
    if not refused:
        if duplicate and not stored:
            return DUPLICATE_HELD if vhost.log.busy else DUPLICATE
        return HELD if held else ACCEPTED
    return Published(True, stored, held, True)


def _deduplicated(vhost: VirtualHost, window: ExchangeDedupe, message: Message,
                  extra_routing_keys: tuple[str, ...], mandatory: bool,
                  counters: ExchangeCounters | None, origin: Origin | None) -> Published:
    """A publish to a delayed exchange with a window (``basic_publish`` checks the others
    itself): a duplicate is counted and confirmed, a new key is remembered once the message
    is scheduled (that counts as taken, ``dedupe.py``), so a duplicate is never
    scheduled."""
    key = window.check(message)
    if key is not None and not key:  # SEEN: a duplicate
        if counters is not None:
            counters.publish += 1
        return DUPLICATE_HELD if window.pending else DUPLICATE
    out = vhost.delays.publish(message, extra_routing_keys, mandatory, counters, origin)
    if key is not None and out.stored:
        window.admit(key)
    return out


class AwaitingOrigin:
    """A publisher without an AMQP channel that can wait (an HTTP publish): traced with no
    channel number, and held back, as a channel under flow control is, until every queue
    it was paused by is back under its low mark (``caught_up``)."""

    trace_channel = None
    trace_confirm = False

    def __init__(self, user: str) -> None:
        self.trace_user = user
        self._behind: set[Queue] = set()
        self._released: asyncio.Future[None] | None = None

    def flow_wait(self, queue: Queue) -> None:
        if queue not in self._behind:
            self._behind.add(queue)
            queue.flow_waiters.add(self)

    def flow_release(self, queue: Queue) -> None:
        """Called by ``queue`` once it has caught up (or is deleted)."""
        self._behind.discard(queue)
        if not self._behind and self._released is not None and not self._released.done():
            self._released.set_result(None)

    async def caught_up(self) -> None:
        """Return once no queue holds this publisher back."""
        if self._behind:
            self._released = asyncio.get_running_loop().create_future()
            await self._released

    def leave(self) -> None:
        """Stop waiting on any queue (done, or the caller gave up: a client went away)."""
        for queue in self._behind:
            queue.flow_waiters.discard(self)
        self._behind.clear()
