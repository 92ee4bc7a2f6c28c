"""How a connection ends: a hard error, a close by the broker, a lost socket, or
missed heartbeats.

Theory of operation
-------------------
Errors are raised by name anywhere below the connection and turned into
``connection.close`` in one place, ``fail``; the connection then waits in
``CLOSING`` for close-ok, at most ``CLOSING_TIMEOUT`` (or ``SILENT_CLOSE_DELAY``
before the connection is open, or after a framing error, when the stream is
not read at all). Every ending releases the same things once
(``release_all``): channels (their unacked messages are requeued), exclusive
queues, flow-control waits. These are functions of the
connection, as ``handshake.py``'s are, typed against it by the ``EndingHost`` Protocol
(a part holding its connection would be a reference cycle per connection).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from pamqp import commands

from leveret.amqp.codec import encode_method
from leveret.amqp.frames import HEARTBEAT_FRAME
from leveret.amqp.handshake import CLOSED, CLOSING, HEADER, OPEN, RUNNING, START, TUNE
from leveret.model.errors import AMQPError, ConnectionError_, ReplyCode

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


class EndingHost(Protocol):
    """What the endings read and change on their connection: the seam, named."""

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
    released: bool  # what the connection held was let go (once)

    def write(self, data: bytes) -> None: ...


def fail(conn: EndingHost, exc: AMQPError) -> None:
    """Hard error: send connection.close and wait for close-ok."""
    if conn.state in (CLOSING, CLOSED):
        return
    text = exc.wire_text  # what goes on the wire; also bounds the log line
    log.warning("connection %s: closing with %s", conn.name, text)
    class_id, method_id = exc.method
    if conn.state == HEADER:
        closed(conn)
        return
    conn.write(encode_method(0, commands.Connection.Close(
        reply_code=int(exc.code), reply_text=text,
        class_id=class_id, method_id=method_id)))
    release_all(conn)
    if conn.state == RUNNING:
        grace = min(conn.heartbeat, CLOSING_TIMEOUT) if conn.heartbeat else CLOSING_TIMEOUT
    else:
        grace = SILENT_CLOSE_DELAY
    conn.close_deadline = conn.clock() + grace
    conn.state = CLOSING


def stop_reading(conn: EndingHost) -> None:
    """The stream is unusable: read no more of it, and drop it soon (RabbitMQ's 3 s)."""
    if conn.state == CLOSING:
        conn.reading = False
        conn.close_deadline = min(conn.close_deadline, conn.clock() + SILENT_CLOSE_DELAY)


def close(conn: EndingHost, code: int, text: str) -> None:
    """Broker-initiated close (shutdown, management UI)."""
    state = conn.state
    if state in (RUNNING, OPEN, TUNE, START):
        fail(conn, ConnectionError_(ReplyCode(code), text))
    elif state != CLOSED:
        closed(conn)


def closed(conn: EndingHost) -> None:
    release_all(conn)
    conn.state = CLOSED
    conn.want_close = True


def release_all(conn: EndingHost) -> None:
    if not conn.released:
        conn.released = True
        conn.broker.churn.connection_closed += 1
    for queue in conn.flow_queues:
        queue.flow_waiters.discard(conn)
    conn.flow_queues.clear()
    channels = list(conn.channels.values())
    conn.channels.clear()
    # Nothing more goes out: a channel's requeued messages must not be handed to a
    # consumer on one of our channels not yet released (a deliver after close).
    conn.writable = False
    for channel in channels:
        channel.release()
        channel.output.drop()
    for queue in conn.exclusive_queues.take_all():
        if conn.vhost is not None:
            conn.vhost.delete_queue(queue)
    conn.broker.connections.discard(conn)


def connection_lost(conn: EndingHost) -> None:
    """The transport is gone: release everything (requeue unacked, drop exclusive queues)."""
    if conn.state != CLOSED:
        log.info("connection %s lost", conn.name)
    release_all(conn)
    conn.state = CLOSED


# -- heartbeats -------------------------------------------------------------------


def heartbeat_tick(conn: EndingHost) -> bool:
    """Called by the adapter every ``heartbeat / 2`` s; False once the peer is dead.

    We send a heartbeat when we have been silent for an interval, and give
    up on a peer silent for two intervals (RabbitMQ's rule).
    """
    if not conn.heartbeat or conn.state == CLOSED:
        return True
    if conn.blocked or conn.flow_queues:  # we are not reading the socket: silence is ours
        conn.last_received = conn.clock()
    now = conn.clock()
    if now - conn.last_received > 2 * conn.heartbeat:
        log.warning("connection %s: missed heartbeats from client, timeout: %ds",
                    conn.name, conn.heartbeat)
        release_all(conn)
        conn.state = CLOSED
        conn.want_close = True
        return False
    if now - conn.last_sent >= conn.heartbeat / 2 and not conn.out:
        conn.write(HEARTBEAT_FRAME)
    return True
