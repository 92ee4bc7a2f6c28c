"""Publish to a stream with confirms from several processes, so the client is not the bound.

One aiormq publisher spends about 220 µs of CPU a message (a full core at 4,500/s), so a
single Python publishing client measured itself, not the broker. Here ``publishers``
processes each open one connection with the load generator's raw client
(``loadgen_client``) and pipeline pre-encoded publishes in batches with a window of
unconfirmed ones (``loadgen_peers.ConfirmPublisher``: confirms read on a fast path), a
few µs of CPU a message. They connect first and start together (a barrier), so the rate
is the publishing alone: messages over the time from the start to the last confirm.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from urllib.parse import unquote, urlsplit

import pamqp.commands as cmd
from loadgen_client import connect, open_channel
from loadgen_peers import ConfirmPublisher, encode_publish

PUBLISHERS = 4  # processes, one connection each
BATCH = 50  # publishes per socket write
WINDOW = 1_000  # unconfirmed publishes per publisher, at most
START_TIMEOUT = 300.0  # seconds for every publisher to connect (a broker under callgrind is slow)


async def _publish_share(url: str, name: str, count: int, size: int,
                         barrier: multiprocessing.synchronize.Barrier) -> None:
    parts = urlsplit(url)
    vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
    conn = await connect(parts.hostname or "127.0.0.1", parts.port or 5672,
                         unquote(parts.username or "guest"), unquote(parts.password or "guest"),
                         vhost, "bench-stream-publisher")
    await open_channel(conn, 1)
    conn.send(cmd.Confirm.Select(), 1)
    await conn.expect(cmd.Confirm.SelectOk)
    message = encode_publish("", name, (b"leveret-stream" * (size // 14 + 1))[:size],
                             properties=cmd.Basic.Properties(delivery_mode=2))
    publisher = ConfirmPublisher(conn, message, BATCH, WINDOW, limit=count)
    barrier.wait(START_TIMEOUT)  # connected: start with the others
    await publisher.run()
    await publisher.wait_all()
    if publisher.error or publisher.nacked:
        raise SystemExit(f"publisher: {publisher.error or ''} {publisher.nacked} nacked")
    await conn.close()


def _publisher(url: str, name: str, count: int, size: int,
               barrier: multiprocessing.synchronize.Barrier) -> None:
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    asyncio.run(_publish_share(url, name, count, size, barrier))


async def publish(url: str, name: str, count: int, size: int,
                  publishers: int = PUBLISHERS) -> float:
    """Publish ``count`` messages of ``size`` bytes to the (declared) stream ``name``;
    the rate in messages per second, once every one is confirmed."""
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(publishers + 1)
    shares = [count // publishers + (i < count % publishers) for i in range(publishers)]
    procs = [ctx.Process(target=_publisher, args=(url, name, share, size, barrier))
             for share in shares]
    for proc in procs:
        proc.start()
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, barrier.wait, START_TIMEOUT)
    start = time.perf_counter()
    for proc in procs:
        await loop.run_in_executor(None, proc.join)
    seconds = time.perf_counter() - start
    failed = [proc.exitcode for proc in procs if proc.exitcode]
    if failed:
        raise SystemExit(f"a publisher failed (exit codes {failed})")
    return count / seconds
