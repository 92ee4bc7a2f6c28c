"""The asyncio process around the sans-IO core: listeners, the store, signals, shutdown.

Kept thin on purpose. ``serve`` locks the data dir, opens the store, recovers
the broker and listens (plain and TLS); each accepted socket gets an
``AMQPProtocol`` (``protocol.py``). ``main`` adds the control socket, the
memory and disk watchers and the services handed in by the entry point
(management, Prometheus), and on SIGINT/SIGTERM closes every client with 320
CONNECTION_FORCED before the last store batch is written.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import gc
import logging
import os
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from leveret.amqp import ready_file, tls
from leveret.amqp.protocol import AMQPProtocol
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
# The data dir and everything in it (store, lock file, ctl socket) are the broker user's
# only: persistent message bodies are in there.
DATA_DIR_MODE = 0o700
DATA_FILE_MODE = 0o600
# The cyclic garbage collector's thresholds for a serving broker. With CPython's default
# (700 new container objects) a broker holding tens of thousands of messages and unacked
# deliveries ran a full collection every few thousand messages, each walking every live
# object: 13% of its CPU in a queue -> consumer -> publisher relay (bench/README.md,
# "Garbage collection"). Reference counting frees what the hot path drops; the collector
# only finds cycles, so it can run far less often for the same memory.
# Every message a queue holds is two tracked objects (its ``Message`` and ``QueueEntry``),
# and the first generation-1 collection after it arrived walks them again, at a cache miss
# or more each: 4-5% of the broker's CPU in the relay and the Spark pipeline. So generation
# 1 runs after 100 young collections (2M new objects), missing the messages consumed in
# between, and generation 2 is considered after each of those (threshold 0) rather than
# every tenth: CPython still runs it only once a quarter of the old objects are new, and
# cyclic garbage that outlived a young collection waits about as long as before (2M new
# objects). A lost connection leaves no cycle (protocol.py).
GC_THRESHOLD = (20_000, 100, 0)


class StartupError(Exception):
    """The broker cannot start (port taken, data dir unusable): one line for the user."""


class Service(Protocol):
    """Something run beside the AMQP listeners on the broker's loop: the management API
    and Prometheus (``leveret.management_ui``), handed in by the entry point because this
    layer may not import the layers above it. Started after the AMQP listeners (so it can
    report them), stopped before them; ``start`` raises ``StartupError`` to abort startup."""

    async def start(self, broker: Broker, config: Config) -> None: ...

    async def stop(self) -> None: ...


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
        silent = [p.transport for p in protocols
                  if not p.closed.done() and p.transport is not None]
        if silent:
            log.warning("%d client(s) did not answer connection.close within %.0f s; dropped",
                        len(silent), SHUTDOWN_GRACE_SECONDS)
        for transport in silent:
            transport.abort()
    try:
        await broker.log.drain()
    except TimeoutError:
        log.error("timed out writing the last batch to the store")
    broker.log.close()
    log.info("broker stopped")


async def watch_memory(broker: Broker, config: Config, interval: float = 1.0) -> None:
    monitor = MemoryMonitor(config.memory_high_watermark,
                            paging_ratio=config.memory_high_watermark_paging_ratio)
    log.info("memory high watermark: %d MiB (%.2f of %d MiB); queues page above %d MiB",
             monitor.limit >> 20, config.memory_high_watermark, monitor.total >> 20,
             monitor.paging_limit >> 20)

    def release() -> None:
        broker.log.release_memory()
        trim_heap()

    while True:
        check_memory(broker, monitor, release)
        await asyncio.sleep(interval)


def check_memory(broker: Broker, monitor: MemoryMonitor, release: Callable[[], None]) -> None:
    """Page and alarm by RSS, measured again after ``release`` when it is over a threshold.

    RSS also counts what the broker does not hold: store pages read while draining a
    backlog (page cache, unmapped by ``release_memory``) and heap that glibc keeps
    mapped after bodies are freed (``trim_heap``). Both are handed back only when memory
    matters: under the paging threshold, freed heap is reused by the next messages, and
    trimming it each second made them fault their pages in again (the relay of
    ``bench/README.md``, "Paging": 0.52-0.55 against 0.38-0.40 page faults a row).
    """
    over_limit, paging = monitor.check()
    if over_limit or paging:
        release()
        over_limit, paging = monitor.check()
    broker.set_memory_pressure(paging)
    broker.set_alarm(MEMORY, over_limit)


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
    if config.ready_file is not None:  # removed once the data dir is ours (serve locks it)
        ready_file.remove(config.ready_file)  # a stale one would say "ready" too early
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
    if config.ready_file is not None:
        try:
            ready_file.write(config.ready_file, ready_file.ready_document(
                broker.listeners, os.getpid(), broker.cluster_name))
        except OSError as exc:
            await _stop(broker, config, servers, started, ctl)
            raise StartupError(f"cannot write the ready file {config.ready_file}: "
                               f"{exc.strerror or exc}") from exc
    tune_gc()
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
    await _stop(broker, config, servers, started, ctl)


async def _stop(broker: Broker, config: Config, servers: list[asyncio.AbstractServer],
                started: list[Service], ctl: asyncio.AbstractServer | None) -> None:
    """Stop what ``main`` started, last first; the ready file goes first, as the broker
    is no longer ready from here on."""
    if config.ready_file is not None:
        ready_file.remove(config.ready_file)
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


def tune_gc() -> None:
    """Collect cycles rarely (``GC_THRESHOLD``), and never walk what start-up and recovery
    built (imports, the recovered broker model): ``gc.freeze`` leaves it out of every
    later collection."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def run(config: Config, services: Sequence[Service] = ()) -> None:
    """Run the broker (and ``services``) until SIGINT/SIGTERM; raises StartupError if it
    cannot start."""
    loop_factory: Any = uvloop.new_event_loop if uvloop is not None else None
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main(config, services))
