#!/usr/bin/env python3
"""Cross-check for loadgen.py: the `transient` scenario written with aiormq.

If this (a general-purpose client, much more CPU per message) reaches about the
same msg/s as loadgen.py against the same broker, the broker - not the load
generator - is the bottleneck.  Not used by run.py.

    python bench/crosscheck_aiormq.py --port 5672 --duration 5
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import time
import uuid

import aiormq
from loadgen_proc import host_cpu_breakdown, host_cpu_ticks, self_cpu_seconds


async def main(args) -> dict:
    url = f"amqp://guest:guest@{args.host}:{args.port}/"
    cconn = await aiormq.connect(url)
    pconn = await aiormq.connect(url)
    cch = await cconn.channel()
    pch = await pconn.channel()
    q = f"leveret-crosscheck-{uuid.uuid4().hex[:8]}"
    await cch.queue_declare(q, durable=False, auto_delete=False)
    if args.prefetch:
        await cch.basic_qos(prefetch_count=args.prefetch)
    count = 0

    async def on_msg(msg: aiormq.abc.DeliveredMessage):
        nonlocal count
        count += 1
        if not args.no_ack:
            await cch.basic_ack(msg.delivery_tag)

    await cch.basic_consume(q, on_msg, no_ack=args.no_ack)
    body = b"x" * args.size
    stop = False
    published = 0

    async def producer():
        nonlocal published
        while not stop:
            await asyncio.gather(*[pch.basic_publish(body, routing_key=q) for _ in range(100)])
            published += 100

    task = asyncio.create_task(producer())
    await asyncio.sleep(args.warmup)
    t0, c0, p0, cpu0, h0 = time.perf_counter(), count, published, self_cpu_seconds(), host_cpu_ticks()
    await asyncio.sleep(args.duration)
    t1, c1, p1, cpu1, h1 = time.perf_counter(), count, published, self_cpu_seconds(), host_cpu_ticks()
    stop = True
    await asyncio.wait([task], timeout=5)
    await cch.queue_delete(q)
    await pconn.close()
    await cconn.close()
    wall = t1 - t0
    return {"client": "aiormq " + importlib.metadata.version("aiormq"), "consumed_per_s": round((c1 - c0) / wall),
            "published_per_s": round((p1 - p0) / wall),
            "client_cpu_share": round((cpu1 - cpu0) / wall, 3),
            **host_cpu_breakdown(h0, h1, wall)}


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5672)
    p.add_argument("--duration", type=float, default=5)
    p.add_argument("--warmup", type=float, default=2)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--prefetch", type=int, default=0)
    p.add_argument("--no-ack", action="store_true")
    a = p.parse_args()
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    print(json.dumps(asyncio.run(main(a))))
