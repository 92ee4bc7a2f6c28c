#!/usr/bin/env python3
"""Instructions a delayed message's release costs the broker, under callgrind.

    python bench/delayed_icount.py --messages 5000
    python bench/delayed_icount.py --messages 5000 --store    # LMDB, its writes counted

The broker model alone (no sockets, no consumer): a durable ``x-delayed-message`` exchange
bound to a durable queue, ``--messages`` persistent messages with ``x-delay`` scheduled
(100-byte bodies, as ``bench/delayed.py`` sends), then the clock moved past their due time
and ``release_due`` called until none is left: each due entry read back in key order,
``x-delay`` rewritten, routed through the exchange and enqueued. Run for ``--messages`` and
twice as many; the difference over the extra messages, divided by their number, is the
cost of scheduling and releasing one (load-independent, unlike ``bench/delayed.py``'s broker
CPU). ``--schedule-only`` stops before the release: subtract it for the release alone.
Without ``--store`` the store is the in-memory one (the loop thread's share); with it,
LMDB written synchronously (the writer thread's share counted too, the fsync not).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from callgrind import callgrind_instructions  # bench/ is not a package: found through sys.path

T0 = 1_800_000_000_000


def workload(messages: int, schedule_only: bool, store_dir: str | None) -> None:
    asyncio.run(_workload(messages, schedule_only, store_dir))


async def _workload(messages: int, schedule_only: bool, store_dir: str | None) -> None:
    """On an event loop, so the log is deferred as in a running broker: one batch per
    release (``RELEASE_BATCH`` messages), written by the group commit's thread."""
    from pamqp import commands

    from leveret.broker.broker import Broker
    from leveret.config import Config
    from leveret.model.message import Message
    from leveret.model.properties import encode_properties

    store = None
    if store_dir is not None:
        from leveret.persistence.lmdb_store import LmdbStore

        store = LmdbStore(Path(store_dir), map_size=1 << 30)  # valgrind maps less than 1 TB
    # No consumer drains the queue here (bench/delayed.py has one): no paging either.
    broker = Broker(Config(queue_messages_in_memory=0), store, asyncio.get_running_loop())
    broker.recover()
    vhost = broker.vhosts["/"]
    now = [T0]
    vhost.delays.clock = lambda: now[0]
    vhost.declare_exchange("dx", "x-delayed-message", True, False, False,
                           {"x-delayed-type": "direct"})
    queue, _ = vhost.declare_queue("q", durable=True, exclusive=False, auto_delete=False,
                                   arguments={})
    vhost.bind(vhost.exchanges["dx"], queue, "k", {})
    raw = encode_properties(commands.Basic.Properties(headers={"x-delay": 60_000},
                                                      delivery_mode=2))
    body = b"x" * 100
    for i in range(messages):
        vhost.delays.publish(Message("dx", "k", raw, body), (), False, None, None)
        if i % 1000 == 999:
            await broker.log.committed()
    await broker.log.committed()
    if schedule_only:
        return
    now[0] = T0 + 60_000
    dx = vhost.delays.by_name["dx"]
    while dx.count:
        vhost.delays.release_due(dx)
        await broker.log.committed()
    if queue.message_count != messages:
        raise SystemExit(f"queued {queue.message_count} of {messages}")
    await broker.log.drain()


def instructions(messages: int, schedule_only: bool, store: bool, out_dir: Path) -> int:
    args = [sys.executable, __file__, "--workload", "--messages", str(messages)]
    if schedule_only:
        args.append("--schedule-only")
    if store:
        args += ["--store-dir", str(out_dir / f"store-{messages}")]
    return callgrind_instructions(args, out_dir / f"callgrind-{messages}.out")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=5_000)
    p.add_argument("--schedule-only", action="store_true", help="schedule, do not release")
    p.add_argument("--store", action="store_true", help="LMDB, written synchronously")
    p.add_argument("--workload", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--store-dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.workload:
        workload(args.messages, args.schedule_only, args.store_dir)
        return
    with tempfile.TemporaryDirectory(prefix="leveret-delayed-icount-") as tmp:
        small = instructions(args.messages, args.schedule_only, args.store, Path(tmp))
        large = instructions(2 * args.messages, args.schedule_only, args.store, Path(tmp))
    what = "scheduled" if args.schedule_only else "scheduled and released"
    label = " (LMDB)" if args.store else ""
    print(f"instructions per message {what}{label}: {(large - small) / args.messages:,.0f}")


if __name__ == "__main__":
    main()
