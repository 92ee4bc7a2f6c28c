"""Where a stream batch's commit time goes: writing LMDB's pages, or the two fsyncs.

    python bench/stream_commit.py                       # 30 batches of 2,000 x 1 KB
    python bench/stream_commit.py --batches 50 --batch 4000 --dir /var/tmp

Could the group commit write the next batch while the previous one fsyncs? This times
the three parts of one LMDB commit the store makes (``sync=True, metasync=True``), on
the filesystem of ``--dir``, with records shaped like a stream's (a message record under
a growing 8-byte id and an index entry under (qid, offset), appended): the same batches
committed three ways, each in a fresh environment:

* ``default``: as the store commits (pages written, fdatasync, meta page written,
  fdatasync): the whole cycle;
* ``nosync``: ``sync=False``, then ``env.sync(True)`` timed apart: how much of the cycle
  the write alone is, and how much the flush;
* ``nometasync``: ``metasync=False`` (data fsynced before the meta page is written; the
  meta page's flush left to the next commit or an explicit ``env.sync``), and the
  explicit sync timed apart: what a pipelined writer would leave on its critical path.

Prints the median milliseconds of each part. ``docs/benchmarks.md`` says what the figures
decide.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import tempfile
import time
from pathlib import Path

import lmdb

KEY = struct.Struct(">IQ")  # (qid, offset), as the store's index keys sort
MSG = struct.Struct(">Q")


def run(path: Path, batches: int, batch: int, size: int, mode: str) -> dict[str, float]:
    env = lmdb.open(str(path), map_size=1 << 34, max_dbs=4, sync=mode != "nosync",
                    metasync=mode == "default", readahead=False)
    messages, index = env.open_db(b"messages"), env.open_db(b"index")
    body = os.urandom(size)
    writes, syncs = [], []
    offset = 0
    for _ in range(batches):
        start = time.perf_counter()
        with env.begin(write=True) as txn:
            mc, ic = txn.cursor(messages), txn.cursor(index)
            mc.putmulti([(MSG.pack(offset + i + 1), body) for i in range(batch)], append=True)
            ic.putmulti([(KEY.pack(1, offset + i), MSG.pack(offset + i + 1))
                         for i in range(batch)], append=True)
        middle = time.perf_counter()
        if mode != "default":
            env.sync(True)
        end = time.perf_counter()
        writes.append(middle - start)
        syncs.append(end - middle)
        offset += batch
    env.close()
    return {"commit": statistics.median(writes) * 1e3, "sync": statistics.median(syncs) * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--batch", type=int, default=2_000, help="messages a batch")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--dir", type=Path, default=None, help="where the stores go")
    args = parser.parse_args()
    print(f"{args.batches} batches of {args.batch} x {args.size} B; median ms; "
          f"load average {os.getloadavg()[0]:.2f}")
    for mode in ("default", "nosync", "nometasync"):
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            figures = run(Path(tmp), args.batches, args.batch, args.size, mode)
        print(f"  {mode:10}  commit {figures['commit']:6.2f}  then env.sync "
              f"{figures['sync']:6.2f}  total {figures['commit'] + figures['sync']:6.2f}")


if __name__ == "__main__":
    main()
