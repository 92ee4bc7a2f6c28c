"""Stream queues over AMQP 0-9-1: publish and consume rates, Leveret beside RabbitMQ.

    python bench/stream_rates.py                      # a Leveret started here, and RabbitMQ
    python bench/stream_rates.py --messages 200000 --size 1024 --no-rabbitmq
    python bench/stream_rates.py --rounds 1 --no-rabbitmq --profile /tmp/stream.prof

One run per broker, same client, same machine: a stream is declared, ``--messages``
messages of ``--size`` bytes are published with confirms by ``--publishers`` processes
(``stream_publishers.py``: one connection each, a window of unconfirmed publishes), then read from ``first`` by 1 consumer, then by 10 consumers at once (each reads
the whole log; the rate counts every delivery), prefetch ``PREFETCH``, acked with
``multiple`` every ``ACK_EVERY``. The 10 consumers start at different offsets' worth of
delay only through their own speed; each costs one read of the store. For Leveret the
broker's peak RSS (VmHWM) is printed too. Leveret fsyncs every confirmed batch; RabbitMQ's
streams do not fsync.

``--rounds`` runs it all that many times on fresh streams and prints the median rate of
each phase, and the broker's CPU per message (its process tree's user+system time from
/proc over the phase, divided by the messages published or delivered): on a shared
machine the rates move with the load (printed), CPU per message much less. The client's
CPU per message (this process and its reader processes) is printed beside the broker's:
when it is the larger, the readers, not the broker, set the rate.
``--profile`` runs the Leveret under cProfile (stopped with SIGINT, which writes it).

Readers (``--client``): ``raw`` (the default) reads each consumer in its own process with
the Spark bridge's blocking client in raw-delivery mode (frames counted, not decoded),
so that the broker, not one Python client process decoding every delivery, is what is
measured: with ``aiormq`` the ten readers share one client process, which saturates its
core before either broker does (the broker CPU per message shows it).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import socket
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiormq
import stream_publishers
from broker_proc import start_leveret
from loadgen_proc import process_tree, tree_cpu_seconds

PREFETCH = 1_000
ACK_EVERY = 500
RABBITMQ = "amqp://guest:guest@127.0.0.1:5672/%2F"
STREAM = {"x-queue-type": "stream"}


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
    """Declare the stream, then publish with ``PUBLISHERS[0]`` processes
    (``stream_publishers.py``: one Python publisher would be the bound)."""
    conn = await aiormq.connect(url)
    await (await conn.channel()).queue_declare(name, durable=True, arguments=STREAM)
    await conn.close()
    return await stream_publishers.publish(url, name, count, size, PUBLISHERS[0])


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


def read_raw(url: str, name: str, count: int, offset: object = "first") -> None:
    """One reader in a child process: ``count`` deliveries from ``offset``, acked in steps."""
    from leveret.spark_sink.amqp_client import Connection

    conn = Connection(url, raw_deliveries=True).open()
    try:
        conn.qos(PREFETCH)
        conn.consume(name, {"x-stream-offset": offset})
        seen = 0
        while seen < count:
            if not conn.pump(120):
                raise SystemExit(f"no delivery for 120 s after {seen}")
            raw = conn.raw
            while raw:
                tag, _frames = raw.popleft()
                seen += 1
                if seen % ACK_EVERY == 0 or seen == count:
                    conn.ack(tag, multiple=True)
    finally:
        conn.close()


CLIENT = ["raw"]  # --client
PUBLISHERS = [stream_publishers.PUBLISHERS]  # --publishers
READERS = [1, 10]  # the consume phases' reader counts (--readers)


async def consume(url: str, name: str, count: int, readers: int) -> float:
    start = time.perf_counter()
    if CLIENT[0] == "aiormq":
        await asyncio.gather(*(read_all(url, name, count) for _ in range(readers)))
        return readers * count / (time.perf_counter() - start)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=read_raw, args=(url, name, count)) for _ in range(readers)]
    for proc in procs:
        proc.start()
    loop = asyncio.get_running_loop()
    for proc in procs:
        await loop.run_in_executor(None, proc.join)
        if proc.exitcode:
            raise SystemExit(f"a reader failed (exit code {proc.exitcode})")
    return readers * count / (time.perf_counter() - start)


# phase -> (msg/s, broker CPU µs per message, client CPU µs per message)
Figures = dict[str, tuple[float, float, float]]


def client_cpu() -> float:
    """This process's CPU seconds and its waited-for children's (the reader processes)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


async def run(url: str, pid: int, count: int, size: int) -> Figures:
    name = f"bench-stream-{uuid.uuid4().hex[:8]}"

    async def phase(messages: int,
                    work: Callable[[], Awaitable[float]]) -> tuple[float, float, float]:
        pids = process_tree(pid)
        cpu, client = tree_cpu_seconds(pids), client_cpu()
        rate = await work()
        return (rate, (tree_cpu_seconds(pids) - cpu) / messages * 1e6,
                (client_cpu() - client) / messages * 1e6)

    try:
        figures = {"publish": await phase(count, lambda: publish(url, name, count, size))}
        for readers in READERS:
            figures[f"consume x{readers}"] = await phase(
                readers * count, lambda n=readers: consume(url, name, count, n))
        return figures
    finally:
        conn = await aiormq.connect(url)
        await (await conn.channel()).queue_delete(name)
        await conn.close()


def rounds(url: str, pid: int, args: argparse.Namespace) -> Figures:
    """Each phase's median rate and median CPU per message over ``args.rounds`` runs."""
    runs = [asyncio.run(run(url, pid, args.messages, args.size)) for _ in range(args.rounds)]
    return {k: (statistics.median(r[k][0] for r in runs),
                statistics.median(r[k][1] for r in runs),
                statistics.median(r[k][2] for r in runs)) for k in runs[0]}


def rabbitmq_pid(port: int = 5672) -> int | None:
    """The pid of the RabbitMQ node (Erlang's ``beam.smp``) listening on ``port``, for its
    CPU time: another node on the machine (a test's) must not be taken for it."""
    sockets = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                sockets.add(f"socket:[{fields[9]}]")
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or (entry / "comm").read_text().strip() != "beam.smp":
                continue
            if any(os.readlink(fd) in sockets for fd in (entry / "fd").iterdir()):
                return int(entry.name)
        except OSError:
            continue
    return None


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
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", type=Path, help="cProfile output of the Leveret")
    parser.add_argument("--client", choices=("raw", "aiormq"), default="raw")
    parser.add_argument("--publishers", type=int, default=stream_publishers.PUBLISHERS,
                        help="publishing processes")
    parser.add_argument("--window", type=int, default=stream_publishers.WINDOW,
                        help="unconfirmed publishes per publisher, at most")
    parser.add_argument("--readers", default="1,10",
                        help="reader counts of the consume phases ('' for publish only)")
    args = parser.parse_args()
    READERS[:] = [int(n) for n in args.readers.split(",") if n]
    stream_publishers.WINDOW = args.window
    CLIENT[0] = args.client
    PUBLISHERS[0] = args.publishers
    results: dict[str, Figures] = {}
    load = [os.getloadavg()[0]]
    wrapper = ["-m", "cProfile", "-o", str(args.profile)] if args.profile else []
    with tempfile.TemporaryDirectory() as tmp:
        proc, url, _ = start_leveret(Path(tmp), wrapper=wrapper)
        sampler = Sampler(proc.pid)
        sampler.start()
        try:
            results["leveret"] = rounds(url, proc.pid, args)
            sampler.stopped.set()
            memory = memory_mib(proc.pid)
        finally:
            proc.send_signal(signal.SIGINT if args.profile else signal.SIGTERM)
            proc.wait(60)
    beam = rabbitmq_pid()
    if not args.no_rabbitmq and rabbitmq_up() and beam is not None:
        results["rabbitmq"] = rounds(RABBITMQ, beam, args)
    load.append(os.getloadavg()[0])
    print(f"{args.messages} x {args.size} B, {args.publishers} publishers, {args.client} "
          f"readers, median of {args.rounds} "
          f"round(s); msg/s (consume: deliveries/s over all readers), broker / client CPU µs/msg; "
          f"load average {load[0]:.2f} -> {load[1]:.2f}")
    for broker, figures in results.items():
        print(f"  {broker:9}" + "".join(f"  {k} {v:>7,.0f} ({c:4.1f} / {u:4.1f} µs)"
                                        for k, (v, c, u) in figures.items()))
    if "rabbitmq" in results:
        lev, rmq = results["leveret"], results["rabbitmq"]
        print("  ratio    " + "".join(f"  {k} {lev[k][0] / rmq[k][0]:>9.2f} "
                                      f"(CPU {rmq[k][1] / lev[k][1]:4.2f}x less)" for k in lev))
    print(f"  Leveret peak RSS (VmHWM) {memory.get('VmHWM', 0):.0f} MiB; sampled peaks: "
          f"RSS {sampler.peaks['VmRSS']:.0f} MiB, heap (RssAnon) "
          f"{sampler.peaks['RssAnon']:.0f} MiB (the rest is the store's mapped page cache)")


if __name__ == "__main__":
    main()
