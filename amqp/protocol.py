"""The asyncio adapter of one connection: a socket and its timers around the sans-IO core.

Kept thin on purpose. Each TCP connection gets an ``AMQPProtocol`` that feeds
bytes to a ``Connection`` and writes what it produces. Output from other
connections (deliveries, confirms) is flushed once per loop turn with
``writelines``. When the socket's write buffer is full the connection stops
receiving deliveries until it drains (``pause_writing``).

Output backpressure: deliveries stop at the transport's high-water mark, but
what a connection's own input produces (basic.return, confirms, replies) is
written regardless. A client that publishes and never reads would make that
output pile up without bound, so once the unsent output passes
``OUTPUT_PAUSE_BYTES`` we stop reading the socket, and resume when the
transport reports it drained (``resume_writing``, at its low-water mark):
one pause, one release, as for the store writer and resource alarms. The
test costs nothing while the socket keeps up: it runs only after
``pause_writing``.

Closing: once the core has sent connection.close (state CLOSING) the socket
is dropped at the core's ``close_deadline``, and not read at all once the
core says the stream is unusable (``reading`` False, after a framing error).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import TYPE_CHECKING, Any

from leveret.amqp.connection import CLOSED, CLOSING, RUNNING, Connection
from leveret.node import tls

if TYPE_CHECKING:
    from leveret.broker.broker import Broker
    from leveret.config import Config

log = logging.getLogger(__name__)


def _nothing() -> None:
    """What a lost connection's core calls instead of its adapter."""


# After close-ok to a client's connection.close, how long the client has to close the socket.
CLOSE_GRACE_SECONDS = 1.0
# Stop reading a connection whose unsent output passes this (bytes); RabbitMQ bounds the
# same thing with credit flow between its writer and reader processes. Big enough for a
# full batch of deliveries and confirms to a client that does read, small next to RAM.
OUTPUT_PAUSE_BYTES = 4 << 20


class AMQPProtocol(asyncio.Protocol):
    def __init__(self, broker: Broker, config: Config, loop: asyncio.AbstractEventLoop) -> None:
        self.broker = broker
        self.config = config
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.conn: Connection | None = None
        self._flush_pending = False
        self._closing_later = False
        self._timer: asyncio.TimerHandle | None = None
        self._beating = False  # heartbeat timer running (replaces the handshake timer)
        self.closed = loop.create_future()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn = Connection(self.broker, self.config, peer[:2] if peer else None,
                               on_output=self._schedule_flush, clock=self.loop.time)
        self.conn.peer_cert_user = tls.peer_cert_user(transport, self.config)
        self.conn.tls_info = tls.session_info(transport)
        self.conn.on_flow_release = self._flow_release
        local = transport.get_extra_info("sockname")
        if isinstance(local, tuple):
            self.conn.local = local[:2]
        self._flow_paused = False
        self._store_paused = False
        self._input_paused = False  # a burst is handled over several loop turns
        self._output_paused = False  # unsent output over OUTPUT_PAUSE_BYTES
        self._reading_stopped = False  # closing: the core reads no more of this stream
        self._close_timer: asyncio.TimerHandle | None = None
        self._close_at = 0.0
        self.broker.protocols.add(self)
        self._timer = self.loop.call_later(self.config.handshake_timeout, self._handshake_timeout)

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        assert conn is not None
        conn.receive_data(data)
        if conn.flow_queues and not self._flow_paused and self.transport is not None:
            self._flow_paused = True
            self.transport.pause_reading()
        if self.broker.alarms and conn.has_published and not conn.blocked:
            self.maybe_block()
        if not self._store_paused and self.broker.log.backlogged and self.transport is not None:
            # The store writer is behind: stop taking work until its batch is written.
            self._store_paused = True
            self.transport.pause_reading()
            self.broker.log.when_caught_up(self._store_release)
        if conn.input_pending and self.transport is not None:
            # Frames left for the next turn (Connection.FRAMES_PER_TURN): read no more meanwhile.
            if not self._input_paused:
                self._input_paused = True
                self.transport.pause_reading()
            self.loop.call_soon(self._more_input)
        self._flush()

    def _more_input(self) -> None:
        if self.conn is None or self.transport is None:
            return
        self.data_received(b"")
        if not self.conn.input_pending and self._input_paused:
            self._input_paused = False
            self._resume_if_free()

    def _may_read(self) -> bool:
        """Reading resumes only when no reason to pause is left (flow, alarm, store)."""
        return not (self._flow_paused or self._store_paused or self._output_paused
                    or self._input_paused or self._reading_stopped
                    or (self.conn is not None and self.conn.blocked))

    def _resume_if_free(self) -> None:
        if (self._may_read() and self.transport is not None
                and not self.transport.is_closing()):
            self.transport.resume_reading()

    def _flow_release(self) -> None:
        if self._flow_paused:
            self._flow_paused = False
            self._resume_if_free()

    def _store_release(self) -> None:
        if self._store_paused:
            self._store_paused = False
            self._resume_if_free()

    def maybe_block(self) -> None:
        """Under an alarm, stop reading a connection that publishes."""
        conn, transport = self.conn, self.transport
        if conn is None or transport is None or conn.blocked or not conn.has_published:
            return
        conn.block(" & ".join(sorted(self.broker.alarms)) + " alarm")
        transport.pause_reading()
        self._schedule_flush()

    def unblock(self) -> None:
        conn, transport = self.conn, self.transport
        if conn is None or transport is None or not conn.blocked:
            return
        conn.unblock()
        self._resume_if_free()
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_pending:
            self._flush_pending = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        conn, transport = self.conn, self.transport
        if conn is None or transport is None:
            return
        out = conn.data_to_send()
        if out and not transport.is_closing():
            transport.writelines(out)
            if (not conn.writable and not self._output_paused
                    and transport.get_write_buffer_size() > OUTPUT_PAUSE_BYTES):
                # The peer does not read what its own input produces: take no more input.
                self._output_paused = True
                transport.pause_reading()
        if conn.state == CLOSING:
            self._closing(conn, transport)
        if conn.want_close:
            if conn.peer_closes:
                if not self._closing_later:
                    self._closing_later = True
                    self.loop.call_later(CLOSE_GRACE_SECONDS, transport.close)
            else:
                transport.close()
        elif conn.state == RUNNING and conn.heartbeat and not self._beating:
            # The handshake just finished: its timer gives way to heartbeats at once.
            if self._timer is not None:
                self._timer.cancel()
            self._start_heartbeats()

    def _closing(self, conn: Connection, transport: asyncio.Transport) -> None:
        """We sent connection.close: drop the socket at the core's deadline, stop reading if told."""
        if not conn.reading and not self._reading_stopped:
            self._reading_stopped = True
            transport.pause_reading()
        if self._close_timer is None or conn.close_deadline < self._close_at:
            if self._close_timer is not None:
                self._close_timer.cancel()
            self._close_at = conn.close_deadline
            self._close_timer = self.loop.call_at(self._close_at, self._close_timeout)

    def _close_timeout(self) -> None:
        self._close_timer = None
        if self.transport is not None and self.conn is not None and self.conn.state == CLOSING:
            log.info("connection %s: no close-ok in time, dropping it", self.conn.name)
            self.transport.abort()

    def pause_writing(self) -> None:
        if self.conn is not None:
            self.conn.set_writable(False)

    def resume_writing(self) -> None:
        if self._output_paused:
            self._output_paused = False
            self._resume_if_free()
        if self.conn is not None:
            self.conn.set_writable(True)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._close_timer is not None:
            self._close_timer.cancel()
            self._close_timer = None
        if self.conn is not None:
            self.conn.connection_lost()
            # The core's callbacks are bound to this adapter: a cycle that would outlive the
            # collector's young generation (server.GC_THRESHOLD collects older ones rarely).
            self.conn.on_output = self.conn.on_flow_release = _nothing
        self.broker.protocols.discard(self)
        if not self.closed.done():
            self.closed.set_result(None)

    # -- timers -----------------------------------------------------------------

    def _handshake_timeout(self) -> None:
        self._timer = None
        conn = self.conn
        if conn is None or conn.state == CLOSED:
            return
        if conn.state != RUNNING:
            log.warning("connection %s: handshake timeout, closing", conn.name)
            if self.transport is not None:
                self.transport.close()
            return
        if conn.heartbeat:
            self._start_heartbeats()

    def _start_heartbeats(self) -> None:
        assert self.conn is not None
        self._beating = True
        self._timer = self.loop.call_later(max(self.conn.heartbeat / 2, 0.5), self._heartbeat)

    def _heartbeat(self) -> None:
        self._timer = None
        conn = self.conn
        if conn is None or self.transport is None:
            return
        if self._output_paused or self._store_paused:
            conn.last_received = self.loop.time()  # we are not reading: the silence is ours
        if not conn.heartbeat_tick():
            self.transport.abort()
            return
        self._flush()
        self._start_heartbeats()
