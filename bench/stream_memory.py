"""A long stream read by ten consumers at different offsets: the broker's memory stays bounded.

    nice python bench/stream_memory.py                     # 10M x 1 KB (half an hour here)
    python bench/stream_memory.py --messages 200000

A Leveret is started here; ``--messages`` messages of ``--size`` bytes are published to a
stream with confirms, then ten readers (one process each, ``stream_rates.read_raw``) start
at offsets spread evenly over the log and each reads ``--messages / 10`` messages, so
together they read the whole log once, at ten places at a time. The broker's RSS is
sampled every 0.2 s throughout: the figures printed are the peaks while publishing and
while reading (printed before the stream is deleted), as VmRSS (what ``ps`` shows, including the store's memory-mapped pages the
kernel may drop at will) and RssAnon (the broker's own heap). What bounds the heap is
each reader's read-ahead and the stream's shared pages (``queues/stream_cache.py``), not
the length of the log.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

import aiormq
from broker_proc import start_leveret
from stream_rates import Sampler, memory_mib, publish, read_raw

READERS = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()
    name = "bench-stream-memory"
    with tempfile.TemporaryDirectory() as tmp:
        proc, url, _ = start_leveret(Path(tmp))
        try:
            idle = memory_mib(proc.pid)
            sampler = Sampler(proc.pid)
            sampler.start()
            began = time.perf_counter()
            rate = asyncio.run(publish(url, name, args.messages, args.size))
            published = dict(sampler.peaks)
            print(f"published {args.messages:,} x {args.size} B at {rate:,.0f} msg/s in "
                  f"{time.perf_counter() - began:,.0f} s", flush=True)
            sampler.peaks = {key: 0.0 for key in sampler.peaks}
            share = args.messages // READERS
            ctx = multiprocessing.get_context("fork")
            readers = [ctx.Process(target=read_raw, args=(url, name, share, i * share))
                       for i in range(READERS)]
            began = time.perf_counter()
            for reader in readers:
                reader.start()
            for reader in readers:
                reader.join()
            seconds = time.perf_counter() - began
            sampler.stopped.set()
            failed = [r.exitcode for r in readers if r.exitcode]
            after = memory_mib(proc.pid)
            print(f"{READERS} readers at offsets 0, {share:,}, ... read {READERS * share:,} in "
                  f"{seconds:,.0f} s ({READERS * share / seconds:,.0f} deliveries/s)"
                  + (f"; FAILED readers: {failed}" if failed else ""))
            print(f"broker MiB: idle RSS {idle['VmRSS']:.0f} (heap {idle['RssAnon']:.0f}); "
                  f"peak while publishing RSS {published['VmRSS']:.0f} (heap "
                  f"{published['RssAnon']:.0f}); peak while reading RSS "
                  f"{sampler.peaks['VmRSS']:.0f} (heap {sampler.peaks['RssAnon']:.0f}); after "
                  f"RSS {after['VmRSS']:.0f} (heap {after['RssAnon']:.0f}); load average "
                  f"{os.getloadavg()[0]:.2f}", flush=True)
        finally:
            began = time.perf_counter()
            asyncio.run(_delete(url, name))
            print(f"deleted the stream in {time.perf_counter() - began:,.0f} s; broker peak "
                  f"RSS (VmHWM) {memory_mib(proc.pid)['VmHWM']:.0f} MiB")
            proc.terminate()
            proc.wait(60)


async def _delete(url: str, name: str) -> None:
    conn = await aiormq.connect(url)
    await (await conn.channel()).queue_delete(name)
    await conn.close()


if __name__ == "__main__":
    main()
