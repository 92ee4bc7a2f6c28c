"""Stream queues over AMQP 0-9-1: publish and consume rates, Leveret beside RabbitMQ.

    python bench/stream_rates.py                      # a Leveret started here, and RabbitMQ
    python bench/stream_rates.py --messages 200000 --size 1024 --no-rabbitmq

One run per broker, same client, same machine: a stream is declared, ``--messages``
messages of ``--size`` bytes are published with confirms (aiormq, up to ``WINDOW`` in
flight), then read from ``first`` by 1 consumer, then by 10 consumers at once (each reads
the whole log; the rate counts every delivery), prefetch ``PREFETCH``, acked with
``multiple`` every ``ACK_EVERY``. The 10 consumers start at different offsets' worth of
delay only through their own speed; each costs one read of the store. For Leveret the
broker's peak RSS (VmHWM) is printed too. Leveret fsyncs every confirmed batch; RabbitMQ's
streams do not fsync.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import aiormq

from leveret.node import ready_file

WINDOW = 2_000  # publishes awaiting their confirm
PREFETCH = 1_000
ACK_EVERY = 500
RABBITMQ = "amqp://guest:guest@127.0.0.1:5672/%2F"
STREAM = {"x-queue-type": "stream"}


def start_leveret(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    ready = workdir / "ready.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port", "0",
         "--management-host", "127.0.0.1", "--management-port", "0", "--prometheus-port", "0",
         "--data-dir", str(workdir / "data"), "--ready-file", str(ready)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    document = ready_file.wait(ready, proc, 120)
    if document is None:
        proc.kill()
        raise SystemExit("the broker did not start")
    return proc, f"amqp://guest:guest@127.0.0.1:{document['amqp']}/%2F"


def memory_mib(pid: int) -> dict[str, float]:
    """VmHWM (peak RSS), VmRSS, RssAnon (heap: what the broker holds, not page cache)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
            out[name] = int(value.split()[0]) / 1024
    return out


class Sampler(threading.Thread):
    """Peak RssAnon and VmRSS of ``pid``, sampled every 0.2 s until stopped."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peaks = {"RssAnon": 0.0, "VmRSS": 0.0}
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.2):
            now = memory_mib(self.pid)
            for key in self.peaks:
                self.peaks[key] = max(self.peaks[key], now.get(key, 0.0))


async def publish(url: str, name: str, count: int, size: int) -> float:
    conn = await aiormq.connect(url)
    ch = await conn.channel()
    await ch.queue_declare(name, durable=True, arguments=STREAM)
    body = b"x" * size
    window = asyncio.Semaphore(WINDOW)
    pending: set[asyncio.Future[object]] = set()
    start = time.perf_counter()
    for _ in range(count):
        await window.acquire()
        fut = asyncio.ensure_future(ch.basic_publish(body, routing_key=name))
        fut.add_done_callback(lambda _f: window.release())
        pending.add(fut)
        fut.add_done_callback(pending.discard)
    await asyncio.gather(*pending)
    seconds = time.perf_counter() - start
    await conn.close()
    return count / seconds


async def read_all(url: str, name: str, count: int) -> None:
    conn = await aiormq.connect(url)
    ch = await conn.channel()
    await ch.basic_qos(prefetch_count=PREFETCH)
    done = asyncio.get_running_loop().create_future()
    seen = [0]

    async def on(message: aiormq.abc.DeliveredMessage) -> None:
        seen[0] += 1
        if seen[0] % ACK_EVERY == 0 or seen[0] == count:
            await message.channel.basic_ack(message.delivery.delivery_tag, multiple=True)
        if seen[0] == count and not done.done():
            done.set_result(None)

    await ch.basic_consume(name, on, arguments={"x-stream-offset": "first"})
    await done
    await conn.close()


async def consume(url: str, name: str, count: int, readers: int) -> float:
    start = time.perf_counter()
    await asyncio.gather(*(read_all(url, name, count) for _ in range(readers)))
    return readers * count / (time.perf_counter() - start)


async def run(url: str, count: int, size: int) -> dict[str, float]:
    name = f"bench-stream-{uuid.uuid4().hex[:8]}"
    try:
        return {"publish": await publish(url, name, count, size),
                "consume x1": await consume(url, name, count, 1),
                "consume x10": await consume(url, name, count, 10)}
    finally:
        conn = await aiormq.connect(url)
        await (await conn.channel()).queue_delete(name)
        await conn.close()


def rabbitmq_up() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5672), timeout=0.5):
            return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--no-rabbitmq", action="store_true")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_leveret(Path(tmp))
        sampler = Sampler(proc.pid)
        sampler.start()
        try:
            results["leveret"] = asyncio.run(run(url, args.messages, args.size))
            sampler.stopped.set()
            memory = memory_mib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(30)
    if not args.no_rabbitmq and rabbitmq_up():
        results["rabbitmq"] = asyncio.run(run(RABBITMQ, args.messages, args.size))
    print(f"{args.messages} x {args.size} B, msg/s (consume: deliveries/s over all readers)")
    for broker, figures in results.items():
        print(f"  {broker:9}" + "".join(f"  {k} {v:>9,.0f}" for k, v in figures.items()))
    if "rabbitmq" in results:
        ratios = {k: results["leveret"][k] / results["rabbitmq"][k] for k in results["leveret"]}
        print("  ratio    " + "".join(f"  {k} {v:>9.2f}" for k, v in ratios.items()))
    print(f"  Leveret peak RSS (VmHWM) {memory.get('VmHWM', 0):.0f} MiB; sampled peaks: "
          f"RSS {sampler.peaks['VmRSS']:.0f} MiB, heap (RssAnon) "
          f"{sampler.peaks['RssAnon']:.0f} MiB (the rest is the store's mapped page cache)")


if __name__ == "__main__":
    main()
