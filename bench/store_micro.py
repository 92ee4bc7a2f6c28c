"""Store micro-benchmark: cost of enqueue + commit by batch size, and of the fsync.

    python bench/store_micro.py [--dir D] [--body 1024] [--messages 2000]

For each batch size it records ``batch`` enqueues (1 KB bodies) into one
queue, takes the batch and writes it (one LMDB write transaction, synced),
and reports microseconds per message (recording + commit) and the median
``write_batch`` time (dominated by the fsyncs of data and meta pages).

Then it measures the in-batch cancellation: messages published and acked
within one batch (never written) against the same work split over two
commits (written, then deleted).

Last, the read-back of a paged-out backlog (``--read-back N`` messages, 0 to skip):
``read_queue`` in runs of ``READ_RUN`` entries from the front, as a queue's tail is read
as its head drains (``persistence/lmdb_reads.py``); CPU microseconds per entry, the
store's page budget on, the best of three passes.

``--dir`` should be on the file system the broker will use: fsync cost is
the whole story at small batch sizes (tmpfs would make it look free).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeAlias

from leveret.model.message import Message
from leveret.persistence.batch import Recorder
from leveret.persistence.lmdb_store import LmdbStore
from leveret.persistence.memory import MemoryStore
from leveret.persistence.store import QueueDef

PROPS = b"\x10\x00\x02"  # delivery-mode 2
BATCH_SIZES = (1, 10, 100, 1000)
READ_RUN = 2_000  # queues/plain_store.py's PAGE_BATCH

Store: TypeAlias = "_Recording"


def enqueue_commit(store: Store, qid: int, total: int, batch: int,
                   body: bytes) -> tuple[float, float, float]:
    """(µs per message, median and 95th percentile ms per write_batch)."""
    seq = store.queue_stats(qid).next_seq
    commits: list[float] = []
    start = time.perf_counter()
    for _ in range(max(1, total // batch)):
        for _ in range(batch):
            store.enqueue(qid, seq, Message("", "q", PROPS, body))
            seq += 1
        taken = store.take_batch()
        t0 = time.perf_counter()
        store.write_batch(taken)
        commits.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    p95 = sorted(commits)[int(len(commits) * 0.95)] if len(commits) > 1 else commits[0]
    return elapsed / (len(commits) * batch) * 1e6, statistics.median(commits) * 1e3, p95 * 1e3


def publish_ack(store: Store, qid: int, total: int, batch: int, body: bytes,
                same_batch: bool) -> float:
    """µs per message published and acked, within one batch or across two."""
    seq = store.queue_stats(qid).next_seq
    start = time.perf_counter()
    for _ in range(max(1, total // batch)):
        messages = []
        for _ in range(batch):
            m = Message("", "q", PROPS, body)
            store.enqueue(qid, seq, m)
            messages.append((seq, m))
            seq += 1
        if not same_batch:
            store.write_batch(store.take_batch())
        for s, m in messages:
            store.remove(qid, s, m)
        store.write_batch(store.take_batch())
    return (time.perf_counter() - start) / (max(1, total // batch) * batch) * 1e6


class _Recording(Recorder):
    """A recorder in front of a store, committing when told (group commit minus its thread)."""

    def __init__(self, store: Any) -> None:
        super().__init__(store.state())
        self.store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def run(directory: Path, body_size: int, total: int) -> None:
    body = b"x" * body_size
    opened: list[Callable[[], _Recording]] = [
        lambda: _Recording(LmdbStore(directory / "store")),
        lambda: _Recording(MemoryStore()),
    ]
    print(f"store micro-benchmark: {body_size} B bodies, ~{total} messages per row, "
          f"LMDB in {directory}")
    print(f"{'store':8} {'batch':>6} {'µs/msg':>9} {'commit ms p50':>14} {'p95':>8} {'msg/s':>9}")
    for make in opened:
        store = make()
        name = "lmdb" if isinstance(store.store, LmdbStore) else "memory"
        qid = store.put_queue(QueueDef("/", "bench"))
        store.write_batch(store.take_batch())
        for batch in BATCH_SIZES:
            n = min(total, 200 * batch) if batch == 1 else total
            per_msg, p50, p95 = enqueue_commit(store, qid, n, batch, body)
            print(f"{name:8} {batch:>6} {per_msg:>9.1f} {p50:>14.3f} {p95:>8.3f} "
                  f"{1e6 / per_msg:>9.0f}")
        store.purge(qid)
        store.write_batch(store.take_batch())
        store.close()

    print()
    print("publish + ack of the same messages (LMDB, batch 100):")
    store = _Recording(LmdbStore(directory / "cancel"))
    qid = store.put_queue(QueueDef("/", "bench"))
    store.write_batch(store.take_batch())
    split = publish_ack(store, qid, total, 100, body, same_batch=False)
    folded = publish_ack(store, qid, total, 100, body, same_batch=True)
    store.close()
    print(f"  across two commits (written, then deleted): {split:8.1f} µs/msg")
    print(f"  within one commit (cancelled, never written): {folded:6.1f} µs/msg "
          f"({split / folded:.1f}x)")


def read_back(directory: Path, body_size: int, total: int) -> float:
    """CPU µs per entry to read a backlog of ``total`` messages back, run by run."""
    store = _Recording(LmdbStore(directory / "read-back"))
    qid = store.put_queue(QueueDef("/", "bench"))
    body = b"x" * body_size
    for seq in range(total):
        store.enqueue(qid, seq, Message("", "q", PROPS, body))
        if seq % 5_000 == 4_999:
            store.write_batch(store.take_batch())
    store.write_batch(store.take_batch())
    passes = []
    for _ in range(3):
        store.release_memory()
        first, read = 0, 0
        start = time.process_time()
        while batch := store.read_queue(qid, first, READ_RUN):
            first = batch[-1].seq + 1
            read += len(batch)
        passes.append((time.process_time() - start) / max(read, 1) * 1e6)
    store.close()
    return min(passes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, help="where to create the LMDB files (default: a "
                        "temporary directory, removed afterwards)")
    parser.add_argument("--body", type=int, default=1024, help="body size in bytes")
    parser.add_argument("--messages", type=int, default=5000, help="messages per row")
    parser.add_argument("--read-back", type=int, default=200_000,
                        help="backlog read back from the store (0: skip)")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="leveret-store-micro-", dir=args.dir))
    try:
        run(directory, args.body, args.messages)
        if args.read_back:
            per_entry = read_back(directory, args.body, args.read_back)
            print(f"\nread-back of {args.read_back:,} paged-out messages, runs of {READ_RUN:,}: "
                  f"{per_entry:.2f} µs CPU per entry")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
