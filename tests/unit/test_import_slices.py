"""A definitions import in slices (broker/import_slices.py): checked whole before anything
is applied, the loop given back between slices, and an item another client changed
meanwhile skipped with one log line."""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging

import pytest

from leveret.broker import definitions, import_slices
from leveret.broker.broker import Broker
from leveret.config import Config
from leveret.persistence.memory import MemoryStore

from .test_durable_replies import GatedStore


def queues(count: int, **extra: object) -> dict[str, object]:
    return {"queues": [{"name": f"q{i}", "vhost": "/", "durable": True, **extra}
                       for i in range(count)]}


def always_due() -> float:
    """A clock a second ahead at each look: every ``CHECK_EVERY`` steps ends a slice."""
    return float(next(TICKS))


TICKS = itertools.count()


async def broker() -> Broker:
    b = Broker(Config(), MemoryStore(), asyncio.get_running_loop())
    b.accounts.recover([])
    return b


async def test_an_invalid_file_changes_nothing_though_checked_in_slices():
    b = await broker()
    defs = queues(200)
    defs["queues"].append({"name": "bad", "vhost": "nowhere"})  # type: ignore[attr-defined]
    with pytest.raises(definitions.Invalid, match="vhost 'nowhere' does not exist"):
        await import_slices.apply_in_slices(b, defs, clock=always_due)
    assert not b.vhosts["/"].queues
    b.log.close()


async def test_the_loop_runs_between_slices():
    b = await broker()
    task = asyncio.create_task(import_slices.apply_in_slices(b, queues(500), clock=always_due))
    seen = []
    while not task.done():
        seen.append(len(b.vhosts["/"].queues))
        await asyncio.sleep(0)
    assert await task == (500, 0)
    assert len(set(seen)) > 10  # other tasks saw the import part-way, many times
    b.log.close()


async def test_an_item_changed_meanwhile_is_skipped_and_logged(caplog):
    b = await broker()
    vhost = b.vhosts["/"]
    task = asyncio.create_task(import_slices.apply_in_slices(b, queues(300), clock=always_due))
    while "q0" not in vhost.queues:  # the import is applying
        await asyncio.sleep(0)
    assert "q299" not in vhost.queues
    vhost.declare_queue("q299", durable=False, exclusive=False, auto_delete=True, arguments={})
    with caplog.at_level(logging.WARNING):
        assert await task == (299, 1)
    assert vhost.queues["q299"].auto_delete  # the other client's declare stands
    assert "queue 'q299' skipped, changed meanwhile" in caplog.text
    b.log.close()


async def test_the_import_waits_for_a_busy_writer_long_before_clients_would():
    """While a write is in flight the import lets only ``IMPORT_PENDING`` operations pile
    up behind it; the writer never becomes backlogged (which pauses every client) on its
    account."""
    store = GatedStore()
    b = Broker(Config(), store, asyncio.get_running_loop())
    b.accounts.recover([])
    store.gate.set()
    assert await b.log.committed()
    store.gate.clear()  # the next write waits for the test
    count = import_slices.IMPORT_PENDING * 2
    task = asyncio.create_task(import_slices.apply_in_slices(b, queues(count), clock=always_due))
    while not b.log.waiting_over(import_slices.IMPORT_PENDING) and not task.done():
        await asyncio.sleep(0)
    declared = len(b.vhosts["/"].queues)
    for _ in range(50):
        await asyncio.sleep(0)
    assert not task.done() and not b.log.backlogged
    assert len(b.vhosts["/"].queues) == declared < count  # waiting for the writer
    store.gate.set()
    assert await task == (count, 0)
    b.log.close()


async def test_what_the_import_built_is_left_out_of_collections():
    """Between slices the import's survivors are frozen (``gc.freeze``): a generation-2
    collection no longer walks 100,000 queues (1-1.6 s each)."""
    b = await broker()
    assert await import_slices.apply_in_slices(b, queues(500), clock=always_due) == (500, 0)
    # Frozen objects are in no generation a collection walks (gc.get_objects() lists those
    # generations). Counting frozen objects instead depends on what earlier tests in this
    # process froze and have since dropped.
    built = [b.vhosts["/"].queues[f"q{i}"] for i in range(0, 480, 48)]
    walked = {id(o) for o in gc.get_objects()}
    assert not [q.name for q in built if id(q) in walked]
    b.log.close()
