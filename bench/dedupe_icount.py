#!/usr/bin/env python3
"""Instructions a deduplicating exchange's window costs per publish, under callgrind.

    python bench/dedupe_icount.py --window 20000 --messages 20000
    PYTHONPATH=/tmp/other-build python bench/dedupe_icount.py   # another build of leveret

The model work of a publish into a full durable window (``broker/dedupe.py``): read the
key from the raw properties, check it, remember it (evicting the oldest key) and record it
in the pending batch, as ``publishing.basic_publish`` does, without sockets (or a store
write, but with ``--store``). Run in-process under ``valgrind --tool=callgrind`` for ``--messages`` and for twice
as many, after filling the window; the difference over the extra messages is the cost of
one publish, load-independent (unlike ``dedupe_cost.py``'s throughput ratio, which moves
with whatever else the machine runs). ``--baseline`` runs the same loop without the window
(building and peeking the messages only): subtract it. ``--store`` also applies each batch's
window record to an LMDB store (the writer thread's share: its key records and evictions;
the fsync is the kernel's, not counted).
"""

from __future__ import annotations

import argparse
import inspect
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from callgrind import callgrind_instructions  # bench/ is not a package: found through sys.path

BATCH = 1000  # publishes per recorded batch (taken, as the group commit would)


def workload(window: int, messages: int, baseline: bool, store_dir: str | None) -> None:
    """Fill a ``window``-key durable window, then publish ``messages`` fresh keys into it."""
    run = publisher(window, baseline, store_dir)
    run(0, window)
    run(window, messages)


def publisher(window: int, baseline: bool, store_dir: str | None) -> Callable[[int, int], None]:
    """``run(first, n)``: publish keys ``first``..``first + n - 1`` into a new ``window``-key
    durable window, in batches of ``BATCH`` (also used by ``dedupe_misses.py``)."""
    import pamqp.commands as cmd
    from pamqp.header import ContentHeader

    from leveret.broker.dedupe import ExchangeDedupe
    from leveret.model.dedupe import DedupeSettings
    from leveret.model.message import Message
    from leveret.persistence.batch import Recorder
    from leveret.queues.ttl import Timekeeping

    props = cmd.Basic.Properties(delivery_mode=2, headers={"x-deduplication-header": "K" * 12})
    raw = ContentHeader(0, 100, props).marshal()[12:]  # after class, weight and body size

    class Log(Recorder):
        """The group commit as the window sees it: deferred, a batch per ``BATCH`` keys."""

        deferred = True

        def after_commit(self, callback: object) -> None:
            pass

    log = Log()
    log.batch = 0  # (builds before the recorder counted batches itself)
    store = None
    if store_dir is not None:
        from leveret.persistence.lmdb_store import LmdbStore

        store = LmdbStore(Path(store_dir), map_size=1 << 30)  # valgrind maps less than 1 TB
    dedupe = ExchangeDedupe(DedupeSettings(window, None, "x-deduplication-header", True),
                            "/", "x", log, Timekeeping())

    # Builds before ``check``/``admit`` (one call each a publish) asked read, now,
    # duplicate and remember; the oldest of those read the clock with no argument.
    checks = hasattr(ExchangeDedupe, "check")
    takes_ttl = not checks and "ttl_header" in str(inspect.signature(ExchangeDedupe.now))

    def run(first: int, n: int) -> None:
        for start in range(first, first + n, BATCH):
            msgs = [Message("x", "", raw.replace(b"K" * 12, b"%012d" % i), b"x")
                    for i in range(start, start + BATCH)]
            for m in msgs:
                m.persistent  # noqa: B018  (the queue's publish peeks every message anyway)
            if not baseline and checks:  # as publishing.basic_publish does
                for m in msgs:
                    key = dedupe.check(m)
                    if not key:
                        raise SystemExit("no new key read")
                    dedupe.admit(key)
            elif not baseline:
                for m in msgs:
                    key, ttl = dedupe.read(m)
                    if key is None:
                        raise SystemExit("no key read")
                    now = dedupe.now(ttl) if takes_ttl else dedupe.now()  # type: ignore[call-arg]
                    if not dedupe.duplicate(key, now):
                        dedupe.remember(key, ttl, now)
            batch = log.take_batch()
            if store is not None:
                store.write_batch(batch)
            log.batch += 1
            dedupe._batches.clear()  # no commit comes to pop them

    return run


def instructions(window: int, messages: int, baseline: bool, store: bool, out_dir: Path) -> int:
    args = [sys.executable, __file__, "--workload", "--window", str(window),
            "--messages", str(messages)] + (["--baseline"] if baseline else [])
    if store:
        args += ["--store-dir", str(out_dir / f"store-{messages}")]
    return callgrind_instructions(args, out_dir / f"callgrind-{messages}.out")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--window", type=int, default=20_000, help="keys in the full window")
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--baseline", action="store_true", help="the loop without the window")
    p.add_argument("--store", action="store_true",
                   help="also write each batch's window record to an LMDB store")
    p.add_argument("--workload", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--store-dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.workload:
        workload(args.window, args.messages, args.baseline, args.store_dir)
        return
    with tempfile.TemporaryDirectory(prefix="leveret-dedupe-icount-") as tmp:
        small = instructions(args.window, args.messages, args.baseline, args.store, Path(tmp))
        large = instructions(args.window, 2 * args.messages, args.baseline, args.store,
                             Path(tmp))
    label = " (baseline)" if args.baseline else " (with the store)" if args.store else ""
    print(f"instructions per publish{label}: {(large - small) / args.messages:,.0f}")


if __name__ == "__main__":
    main()
