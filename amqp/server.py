"""The asyncio adapter: sockets, timers and signals around the sans-IO core.

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
import errno
import fcntl
import logging
import os
import signal
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from leveret.amqp import tls
from leveret.amqp.connection import CLOSED, CLOSING, RUNNING, Connection
from leveret.broker import control
from leveret.broker.alarms import DISK, MEMORY, DiskMonitor, MemoryMonitor, trim_heap
from leveret.broker.broker import Broker
from leveret.persistence.lmdb_store import LmdbStore
from leveret.persistence.store import StoreError

try:  # uvloop is a dependency except on Windows, where asyncio's own loop is used.
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from leveret.config import Config

log = logging.getLogger(__name__)

# How long shutdown waits for clients to answer connection.close before dropping them.
SHUTDOWN_GRACE_SECONDS = 3.0
# After close-ok to a client's connection.close, how long the client has to close the socket.
CLOSE_GRACE_SECONDS = 1.0
# The data dir and everything in it (store, lock file, ctl socket) are the broker user's
# only: persistent message bodies are in there.
DATA_DIR_MODE = 0o700
DATA_FILE_MODE = 0o600
# Stop reading a connection whose unsent output passes this (bytes); RabbitMQ bounds the
# same thing with credit flow between its writer and reader processes. Big enough for a
# full batch of deliveries and confirms to a client that does read, small next to RAM.
OUTPUT_PAUSE_BYTES = 4 << 20


class StartupError(Exception):
    """The broker cannot start (port taken, data dir unusable): one line for the user."""


class Service(Protocol):
    """Something run beside the AMQP listeners on the broker's loop: the management API
    and Prometheus (``leveret.management_ui``), handed in by the entry point because this
    layer may not import the layers above it. Started after the AMQP listeners (so it can
    report them), stopped before them; ``start`` raises ``StartupError`` to abort startup."""

    async def start(self, broker: Broker, config: Config) -> None: ...

    async def stop(self) -> None: ...


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


def open_store(config: Config) -> tuple[Any, Any]:
    """Lock the data dir (one broker per dir) and open its LMDB store: (store, lock file)."""
    data_dir = Path(config.data_dir)
    try:
        # Persistent bodies are in here: owner only (DATA_DIR_MODE, DATA_FILE_MODE).
        data_dir.mkdir(mode=DATA_DIR_MODE, parents=True, exist_ok=True)
        if data_dir.stat().st_mode & 0o777 != DATA_DIR_MODE:
            os.chmod(data_dir, DATA_DIR_MODE)  # made by an older Leveret, or by hand
        lock = os.fdopen(os.open(data_dir / "leveret.lock", os.O_RDWR | os.O_CREAT | os.O_APPEND,
                                 DATA_FILE_MODE), "a+")
    except OSError as exc:
        raise StartupError(f"data directory {data_dir} is unusable: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        lock.close()
        raise StartupError(f"data directory {data_dir} is in use by another Leveret process") from exc
    try:
        return LmdbStore(data_dir / "store"), lock
    except StoreError as exc:
        lock.close()
        raise StartupError(str(exc)) from exc


async def serve(config: Config, broker: Broker | None = None) -> tuple[Broker, list[asyncio.AbstractServer]]:
    """Start listening; returns the broker and the servers (one per address family)."""
    loop = asyncio.get_running_loop()
    if broker is None:
        store, lock = open_store(config)
        broker = Broker(config, store, loop)
        broker.data_dir_lock = lock
        broker.recover()
    hosts: list[str | None] = list(config.host) or [None]
    servers: list[asyncio.AbstractServer] = []
    for host in hosts:
        try:
            server = await loop.create_server(
                lambda: AMQPProtocol(broker, config, loop), host=host, port=config.port,
                reuse_address=True, backlog=1024)
        except OSError as exc:
            for s in servers:
                s.close()
            where = f"{host or '*'}:{config.port}"
            if exc.errno == errno.EADDRINUSE:
                raise StartupError(f"cannot listen on {where}: port {config.port} is already in use") from exc
            raise StartupError(f"cannot listen on {where}: {exc.strerror or exc}") from exc
        servers.append(server)
        for sock in server.sockets:
            address = sock.getsockname()
            broker.listeners.append(("amqp", address[0], address[1]))
            log.info("listening for AMQP 0-9-1 on %s:%d", address[0], address[1])
    if config.tls_certfile is not None:
        servers += await _serve_tls(broker, config, hosts, servers)
    return broker, servers


async def _serve_tls(broker: Broker, config: Config, hosts: list[str | None],
                     plain: list[asyncio.AbstractServer]) -> list[asyncio.AbstractServer]:
    """The AMQPS listener: the same protocol behind stdlib ssl (amqp/tls.py)."""
    loop = asyncio.get_running_loop()
    try:
        context = tls.server_context(config)
    except tls.TLSConfigError as exc:
        for s in plain:
            s.close()
        raise StartupError(str(exc)) from exc
    servers: list[asyncio.AbstractServer] = []
    for host in hosts:
        try:
            server = await loop.create_server(
                lambda: AMQPProtocol(broker, config, loop), host=host, port=config.tls_port,
                reuse_address=True, backlog=1024, ssl=context,
                ssl_handshake_timeout=config.handshake_timeout)
        except OSError as exc:
            for s in plain + servers:
                s.close()
            raise StartupError(f"cannot listen for AMQPS on {host or '*'}:{config.tls_port}: "
                               f"{exc.strerror or exc}") from exc
        servers.append(server)
        for sock in server.sockets:
            address = sock.getsockname()
            broker.listeners.append(("amqp/ssl", address[0], address[1]))
            log.info("listening for AMQP 0-9-1 over TLS on %s:%d", address[0], address[1])
    return servers


async def shutdown(broker: Broker, servers: list[asyncio.AbstractServer]) -> None:
    """Stop accepting, send 320 CONNECTION_FORCED to every client, wait briefly, close."""
    for server in servers:
        server.close()
    # The broker knows them as Blockable; every one of them is one of ours.
    protocols = [cast(AMQPProtocol, p) for p in broker.protocols]
    broker.close_all()
    for proto in protocols:
        proto._flush()
    if protocols:
        await asyncio.wait([p.closed for p in protocols], timeout=SHUTDOWN_GRACE_SECONDS)
        for proto in protocols:
            if not proto.closed.done() and proto.transport is not None:
                proto.transport.abort()
    try:
        await broker.log.drain()
    except TimeoutError:
        log.error("timed out writing the last batch to the store")
    broker.log.close()
    log.info("broker stopped")


async def watch_memory(broker: Broker, config: Config, interval: float = 1.0) -> None:
    monitor = MemoryMonitor(config.memory_high_watermark)
    log.info("memory high watermark: %d MiB (%.2f of %d MiB)", monitor.limit >> 20,
             config.memory_high_watermark, monitor.total >> 20)
    while True:
        # Store pages read while draining a backlog are page cache, not heap; unmapping
        # them each second keeps RSS a measure of what the broker really holds.
        broker.log.release_memory()
        trim_heap()
        broker.set_alarm(MEMORY, monitor.check())
        await asyncio.sleep(interval)


async def watch_disk(broker: Broker, config: Config, interval: float = 5.0) -> None:
    """Block publishers while free disk space is under ``disk_free_limit`` (RabbitMQ: 50 MB).

    Measured every ``interval`` s and after commits that grew the store (``DiskMonitor``)."""
    loop = asyncio.get_running_loop()
    store = broker.store
    monitor = DiskMonitor(Path(config.data_dir), config.disk_free_limit, store.space,
                          store.file_bytes, loop.time, config.disk_capacity)

    def after_commit() -> None:
        if monitor.due():
            broker.set_alarm(DISK, monitor.check())

    broker.log.on_commit = after_commit
    try:
        while True:
            broker.set_alarm(DISK, monitor.check())
            await asyncio.sleep(interval)
    finally:
        broker.log.on_commit = None


async def main(config: Config, services: Sequence[Service] = ()) -> None:
    loop = asyncio.get_running_loop()
    broker, servers = await serve(config)
    started: list[Service] = []
    try:
        for service in services:
            await service.start(broker, config)
            started.append(service)
    except StartupError:
        for service in reversed(started):
            await service.stop()
        await shutdown(broker, servers)
        raise
    ctl = await _start_control(broker, config)
    watchers = [asyncio.create_task(watch_memory(broker, config)),
                asyncio.create_task(watch_disk(broker, config))]
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            pass
    log.info("Leveret started (%d listener(s)); press Ctrl-C to stop", len(servers))
    await stop.wait()
    log.info("shutting down: closing %d connection(s)", len(broker.connections))
    for watcher in watchers:
        watcher.cancel()
    for service in reversed(started):
        await service.stop()
    if ctl is not None:
        ctl.close()
        control.remove_socket(Path(config.data_dir))
    await shutdown(broker, servers)


async def _start_control(broker: Broker, config: Config) -> asyncio.AbstractServer | None:
    """The ``leveret ctl`` socket; without it the broker still serves AMQP."""
    try:
        return await control.start_server(broker, Path(config.data_dir))
    except OSError as exc:
        log.warning("no control socket in %s (leveret ctl will not work): %s",
                    config.data_dir, exc.strerror or exc)
        return None


def run(config: Config, services: Sequence[Service] = ()) -> None:
    """Run the broker (and ``services``) until SIGINT/SIGTERM; raises StartupError if it
    cannot start."""
    loop_factory: Any = uvloop.new_event_loop if uvloop is not None else None
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main(config, services))
