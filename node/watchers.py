"""The node's watchers: memory (paging and the memory alarm) and free disk space.

Both run as tasks on the broker's loop for as long as the node serves (``process.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from leveret.broker.alarms import DISK, MEMORY, DiskMonitor, MemoryMonitor, trim_heap
from leveret.node.quiet_trim import QuietTrim

if TYPE_CHECKING:
    from leveret.broker.broker import Broker
    from leveret.config import Config

log = logging.getLogger(__name__)


async def watch_memory(broker: Broker, config: Config, interval: float = 1.0) -> None:
    monitor = MemoryMonitor(config.memory_high_watermark,
                            paging_ratio=config.memory_high_watermark_paging_ratio)
    log.info("memory high watermark: %d MiB (%.2f of %d MiB); queues page above %d MiB",
             monitor.limit >> 20, config.memory_high_watermark, monitor.total >> 20,
             monitor.paging_limit >> 20)

    def release() -> None:
        broker.log.release_memory()
        trim_heap()

    loop = asyncio.get_running_loop()
    quiet = QuietTrim()
    while True:
        check_memory(broker, monitor, release)
        if quiet.due(message_activity(broker), loop.time()):
            release()
        await asyncio.sleep(interval)


def message_activity(broker: Broker) -> int:
    """Every message counter of every channel summed: unchanged while nothing flows."""
    return sum(value for _, value in broker.message_stats().items())


def check_memory(broker: Broker, monitor: MemoryMonitor, release: Callable[[], None]) -> None:
    """Page and alarm by RSS, measured again after ``release`` when it is over a threshold.

    RSS also counts what the broker does not hold: store pages read while draining a
    backlog (page cache, unmapped by ``release_memory``) and heap that glibc keeps
    mapped after bodies are freed (``trim_heap``). Both are handed back only when memory
    matters: under the paging threshold, freed heap is reused by the next messages, and
    trimming it each second made them fault their pages in again: 0.52-0.55 against
    0.38-0.40 page faults a relayed row (the bench journal, ``git show
    f42cb0b:bench/README.md``, "Paging").
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

