"""A durable queue's drain from memory against one from its paged-out tail, in one process.

    python bench/paged_drain.py --messages 200000            # default bound (10,000)
    python bench/paged_drain.py --messages 200000 --bound 0  # the backlog kept in memory
    python bench/paged_drain.py --messages 200000 --profile  # and where the time goes

Publishes ``--messages`` persistent 1 KB messages straight into a durable queue of a
broker over an LMDB store (no AMQP: the queue's own ``publish``), waits for the group
commit, then takes and settles every message (settled 100 at a time, as a consumer's
multiple ack) and prints the CPU microseconds a message of that drain. With a bound, all but
the first ``--bound`` messages come back from the store (``Tail.read``,
``persistence/lmdb_reads.py``): the difference between the two runs is the read-back's cost
on the event loop. CPU time of the whole process (the group commit's thread included).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import shutil
import tempfile
import time
from pathlib import Path

from leveret.broker.broker import Broker
from leveret.config import Config
from leveret.model.message import Message
from leveret.persistence.lmdb_store import LmdbStore
from leveret.queues.queue import Queue

PERSISTENT = b"\x10\x00\x02"  # properties: delivery-mode 2
SETTLE_EVERY = 100


def drain(queue: Queue) -> int:
    taken, batch = 0, []
    while (entry := queue.take()) is not None:
        batch.append(entry)
        taken += 1
        if len(batch) == SETTLE_EVERY:
            queue.settle_many(batch)
            batch = []
    if batch:
        queue.settle_many(batch)
    return taken


async def run(directory: Path, messages: int, bound: int, profile: bool, drained: bool = True
              ) -> None:
    broker = Broker(Config(queue_messages_in_memory=bound), LmdbStore(directory),
                    asyncio.get_running_loop())
    queue, _ = broker.vhosts["/"].declare_queue("bench", durable=True, exclusive=False,
                                                auto_delete=False, arguments={})
    body = b"x" * 1024
    for i in range(messages):
        queue.publish(Message("", "bench", PERSISTENT, body))
        if i % 1_000 == 999:
            await asyncio.sleep(0)  # let the group commit take its batches
    await broker.log.committed()
    paged = queue.paged_out
    if not drained:  # the publish alone: bench/paged_icount.py subtracts it
        print(f"bound {bound:,}: {paged:,} of {messages:,} paged out; not drained")
        return
    profiler = cProfile.Profile() if profile else None
    start = time.process_time()
    if profiler is not None:
        profiler.enable()
    taken = drain(queue)
    if profiler is not None:
        profiler.disable()
    spent = time.process_time() - start
    print(f"bound {bound:,}: {paged:,} of {messages:,} paged out; drained {taken:,} at "
          f"{spent / max(taken, 1) * 1e6:.2f} us CPU a message")
    await broker.log.committed()
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--bound", type=int, default=10_000,
                        help="queue_messages_in_memory (0: no bound, the backlog in memory)")
    parser.add_argument("--profile", action="store_true", help="cProfile the drain")
    parser.add_argument("--no-drain", action="store_true",
                        help="publish and commit only (the baseline of bench/paged_icount.py)")
    parser.add_argument("--dir", type=Path, help="where to create the store (default: a "
                        "temporary directory, removed afterwards)")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="leveret-paged-drain-", dir=args.dir))
    try:
        asyncio.run(run(directory / "store", args.messages, args.bound, args.profile,
                        not args.no_drain))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
