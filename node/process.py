"""The process around the broker model: data dir, store, front doors, signals, shutdown.

``run`` locks the data dir (one broker per dir), opens the LMDB store and recovers the
broker, starts the front doors it is handed (``Service``: each starts its listeners and
registers them in ``broker.listeners``; a ``StartupError`` stops those already started),
the ``leveret ctl`` socket, the memory and disk watchers, and writes the ready file. On
SIGINT/SIGTERM it stops them last first (the AMQP front door closes every client with 320
CONNECTION_FORCED) and then writes the store's last batch.
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import logging
import os
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TextIO

from leveret.broker import control
from leveret.broker.broker import Broker
from leveret.node import ready_file
from leveret.node.watchers import watch_disk, watch_memory
from leveret.persistence.lmdb_store import LmdbStore
from leveret.persistence.store import Store, StoreError

try:  # uvloop is a dependency except on Windows, where asyncio's own loop is used.
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from leveret.config import Config

log = logging.getLogger(__name__)

# The data dir and everything in it (store, lock file, ctl socket) are the broker user's
# only: persistent message bodies are in there.
DATA_DIR_MODE = 0o700
DATA_FILE_MODE = 0o600
# The cyclic garbage collector's thresholds for a serving broker. With CPython's default
# (700 new container objects) a broker holding tens of thousands of messages and unacked
# deliveries ran a full collection every few thousand messages, each walking every live
# object: 13% of its CPU in a queue -> consumer -> publisher relay (the bench journal,
# `git show f42cb0b:bench/README.md`, "Garbage collection"). Reference counting frees what
# the hot path drops; the collector only finds cycles, so it can run far less often for the
# same memory.
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
    """A front door run on the broker's loop: the AMQP listeners (``leveret.amqp.server``),
    the management API and Prometheus (``leveret.management_ui``), handed in by the entry
    point because this layer may not import the layers above it. Started in order (each
    registers its listeners in ``broker.listeners``), stopped last first; ``start`` raises
    ``StartupError`` to abort startup."""

    async def start(self, broker: Broker, config: Config) -> None: ...

    async def stop(self) -> None: ...


def open_store(config: Config) -> tuple[LmdbStore, TextIO]:
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
        raise StartupError(
            f"data directory {data_dir} is in use by another Leveret process") from exc
    try:
        return LmdbStore(data_dir / "store", delete_slice=config.queue_delete_slice), lock
    except StoreError as exc:
        lock.close()
        raise StartupError(str(exc)) from exc


def open_broker(config: Config, loop: asyncio.AbstractEventLoop,
                opened: tuple[Store, TextIO] | None = None) -> Broker:
    """The broker model, recovered from the data dir's store (locked for this process);
    ``opened`` is a store and lock already taken (a cluster node that became leader)."""
    store, lock = opened if opened is not None else open_store(config)
    broker = Broker(config, store, loop)
    broker.data_dir_lock = lock
    broker.recover()
    return broker


async def main(config: Config, front_doors: Sequence[Service],
               opened: tuple[Store, TextIO] | None = None) -> None:
    loop = asyncio.get_running_loop()
    # Before anything says "ready": a SIGINT between the ready file and these handlers went
    # to asyncio.Runner's, which cancelled this task without ``_stop``, and the process
    # never exited (17 of 45 brokers interrupted as their ready file appeared). One that
    # arrives while the node starts is kept and honoured once it has started.
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            pass
    broker = open_broker(config, loop, opened)
    if config.ready_file is not None:  # removed once the data dir is ours (it is locked)
        ready_file.remove(config.ready_file)  # a stale one would say "ready" too early
    started: list[Service] = []
    try:
        for service in front_doors:
            await service.start(broker, config)
            started.append(service)
    except StartupError:
        await _stop(broker, config, started, None)
        raise
    ctl = await _start_control(broker, config)
    if config.ready_file is not None:
        try:
            ready_file.write(config.ready_file, ready_file.ready_document(
                broker.listeners, os.getpid(), broker.cluster_name))
        except OSError as exc:
            await _stop(broker, config, started, ctl)
            raise StartupError(f"cannot write the ready file {config.ready_file}: "
                               f"{exc.strerror or exc}") from exc
    tune_gc()
    watchers = [asyncio.create_task(watch_memory(broker, config)),
                asyncio.create_task(watch_disk(broker, config))]
    amqp = sum(1 for protocol, _, _ in broker.listeners if protocol.startswith("amqp"))
    log.info("Leveret started (%d listener(s)); press Ctrl-C to stop", amqp)
    await stop.wait()
    log.info("shutting down: closing %d connection(s)", len(broker.connections))
    for watcher in watchers:
        watcher.cancel()
    await _stop(broker, config, started, ctl)


async def _stop(broker: Broker, config: Config, started: list[Service],
                ctl: asyncio.AbstractServer | None) -> None:
    """Stop what ``main`` started, last first, then write the store's last batch; the ready
    file goes first, as the broker is no longer ready from here on."""
    if config.ready_file is not None:
        ready_file.remove(config.ready_file)
    if ctl is not None:
        ctl.close()
        control.remove_socket(Path(config.data_dir))
    for service in reversed(started):
        await service.stop()
    try:
        await broker.log.drain()
    except TimeoutError:
        log.error("timed out writing the last batch to the store")
    broker.log.close()
    log.info("broker stopped")


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


def run(config: Config, front_doors: Sequence[Service]) -> None:
    """Run the node with ``front_doors`` until SIGINT/SIGTERM; raises StartupError if it
    cannot start."""
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = (
        uvloop.new_event_loop if uvloop is not None else None)
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main(config, front_doors))
