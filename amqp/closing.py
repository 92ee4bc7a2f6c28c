"""How a connection ends: a hard error, a close by the broker, a lost socket, or
missed heartbeats.

Theory of operation
-------------------
Errors are raised by name anywhere below the connection and turned into
``connection.close`` in one place, ``_fail``; the connection then waits in
``CLOSING`` for close-ok, at most ``CLOSING_TIMEOUT`` (or ``SILENT_CLOSE_DELAY``
before the connection is open, or after a framing error, when the stream is
not read at all). Every ending releases the same things once
(``_release_all``): channels (their unacked messages are requeued), exclusive
queues, flow-control waits. ``Closing`` is the base of ``Connection``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pamqp import commands

from leveret.amqp.codec import encode_method
from leveret.amqp.frames import HEARTBEAT_FRAME
from leveret.amqp.handshake import CLOSED, CLOSING, HEADER, OPEN, RUNNING, START, TUNE
from leveret.model.errors import CONNECTION_FORCED, AMQPError, ConnectionError_, ReplyCode

if TYPE_CHECKING:
    from leveret.amqp.channel import Channel
    from leveret.broker.broker import Broker
    from leveret.broker.vhost import VirtualHost

log = logging.getLogger(__name__)

# Once we have sent connection.close, how long the peer has to answer close-ok before the
# adapter drops the socket; meanwhile its stream is read only to find close-ok and the rest
# is discarded unbuffered (FrameBuffer.feed_closing). As RabbitMQ's rabbit_reader: 30 s
# (?CLOSING_TIMEOUT) or the heartbeat if shorter; measured on 3.10: 30.0 s with heartbeat
# 0 and 60, with the client still sending (RabbitMQ read and discarded 10 MB meanwhile).
CLOSING_TIMEOUT = 30.0
# After a framing error (the stream cannot be parsed any more) or an error before the
# connection is open, the socket is dropped after this instead; after a framing error it is
# not read at all meanwhile. RabbitMQ's ?SILENT_CLOSE_DELAY: measured on 3.10, 3.0 s after a
# bad frame end marker (heartbeat 0 or 60) and after a refused tune-ok.
SILENT_CLOSE_DELAY = 3.0


# The exclusive queues a connection holds are checked for deleted ones when their list
# reaches this many, or twice as many as the last check left.
OWNED_CHECK_MIN = 64


class OwnedQueues:
    """The exclusive queues a connection declared: it deletes those left when it ends.

    A queue deleted before that (a reply queue per call, on one long-lived connection)
    leaves the list at the next check, so a connection holds about twice the queues it
    still owns at most, not every queue it ever declared.
    """

    __slots__ = ("_check_at", "_queues")

    def __init__(self) -> None:
        self._queues: list[Any] = []
        self._check_at = OWNED_CHECK_MIN

    def add(self, queue: Any) -> None:
        queues = self._queues
        queues.append(queue)
        if len(queues) >= self._check_at:
            queues[:] = [q for q in queues if not q.deleted]
            self._check_at = max(OWNED_CHECK_MIN, 2 * len(queues))

    def __len__(self) -> int:
        return len(self._queues)

    def take_all(self) -> list[Any]:
        """Every queue added and not checked out as deleted; the list starts afresh."""
        queues, self._queues = self._queues, []
        self._check_at = OWNED_CHECK_MIN
        return queues


class Closing:
    """The endings of a connection, and its heartbeat watch."""

    broker: Broker
    name: str
    state: int
    clock: Callable[[], float]
    out: list[bytes]
    channels: dict[int, Channel]
    exclusive_queues: OwnedQueues
    flow_queues: set[Any]
    vhost: VirtualHost | None
    heartbeat: int
    last_received: float
    last_sent: float
    close_deadline: float
    reading: bool
    writable: bool
    blocked: bool
    want_close: bool
    _released: bool

    def write(self, data: bytes) -> None:
        raise NotImplementedError  # Connection's output

    def _fail(self, exc: AMQPError) -> None:
        """Hard error: send connection.close and wait for close-ok."""
        if self.state in (CLOSING, CLOSED):
            return
        text = exc.wire_text  # what goes on the wire; also bounds the log line
        log.warning("connection %s: closing with %s", self.name, text)
        class_id, method_id = exc.method
        if self.state == HEADER:
            self._closed()
            return
        self.write(encode_method(0, commands.Connection.Close(
            reply_code=int(exc.code), reply_text=text,
            class_id=class_id, method_id=method_id)))
        self._release_all()
        if self.state == RUNNING:
            grace = min(self.heartbeat, CLOSING_TIMEOUT) if self.heartbeat else CLOSING_TIMEOUT
        else:
            grace = SILENT_CLOSE_DELAY
        self.close_deadline = self.clock() + grace
        self.state = CLOSING

    def _stop_reading(self) -> None:
        """The stream is unusable: read no more of it, and drop it soon (RabbitMQ's 3 s)."""
        if self.state == CLOSING:
            self.reading = False
            self.close_deadline = min(self.close_deadline, self.clock() + SILENT_CLOSE_DELAY)

    def close(self, code: int = CONNECTION_FORCED,
              text: str = "broker forced connection closure with reason 'shutdown'") -> None:
        """Broker-initiated close (shutdown, management UI)."""
        if self.state in (RUNNING, OPEN, TUNE, START):
            self._fail(ConnectionError_(ReplyCode(code), text))
        elif self.state != CLOSED:
            self._closed()

    def _closed(self) -> None:
        self._release_all()
        self.state = CLOSED
        self.want_close = True

    def _release_all(self) -> None:
        if not self._released:
            self._released = True
            self.broker.churn.connection_closed += 1
        for queue in self.flow_queues:
            queue.flow_waiters.discard(self)
        self.flow_queues.clear()
        channels = list(self.channels.values())
        self.channels.clear()
        # Nothing more goes out: a channel's requeued messages must not be handed to a
        # consumer on one of our channels not yet released (a deliver after close).
        self.writable = False
        for channel in channels:
            channel.release()
            channel.drop_output()
        for queue in self.exclusive_queues.take_all():
            if self.vhost is not None:
                self.vhost.delete_queue(queue)
        self.broker.connections.discard(self)

    def connection_lost(self) -> None:
        """The transport is gone: release everything (requeue unacked, drop exclusive queues)."""
        if self.state != CLOSED:
            log.info("connection %s lost", self.name)
        self._release_all()
        self.state = CLOSED

    # -- heartbeats ---------------------------------------------------------------

    def heartbeat_tick(self) -> bool:
        """Called by the adapter every ``heartbeat / 2`` s; False once the peer is dead.

        We send a heartbeat when we have been silent for an interval, and give
        up on a peer silent for two intervals (RabbitMQ's rule).
        """
        if not self.heartbeat or self.state == CLOSED:
            return True
        if self.blocked or self.flow_queues:  # we are not reading the socket: silence is ours
            self.last_received = self.clock()
        now = self.clock()
        if now - self.last_received > 2 * self.heartbeat:
            log.warning("connection %s: missed heartbeats from client, timeout: %ds",
                        self.name, self.heartbeat)
            self._release_all()
            self.state = CLOSED
            self.want_close = True
            return False
        if now - self.last_sent >= self.heartbeat / 2 and not self.out:
            self.write(HEARTBEAT_FRAME)
        return True

