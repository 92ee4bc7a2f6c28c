"""Delayed delivery at scale, on a broker of its own (one run, one JSON object at the end).

    python bench/delayed.py --messages 1000000

1. ``plain`` and ``delayed``, in ``--rounds`` alternating rounds of N/rounds each:
   confirmed persistent publishes through a direct exchange to a durable queue (the
   baseline; purged after each round), and with ``x-delay`` one hour to an
   ``x-delayed-message`` exchange (the schedule grows to N): the median rates, and the
   broker's RSS before, at its peak and after (growth: nothing of the schedule is indexed
   in memory; the plain rounds' queue is purged, so its share is one round's at most);
2. ``api``: ``GET /api/exchanges/%2F/dx`` (``messages_delayed``) and the first 100 of
   ``…/delayed`` with N scheduled, 20 times each: median and worst answer;
3. ``restart``: SIGTERM and start again with N scheduled: seconds until ready, and the
   count it recovered;
4. ``lateness``: with the N still scheduled, ``--due-rate`` messages fall due per second
   for ``--due-seconds`` seconds on another delayed exchange (published, pre-encoded, well
   before the first is due), consumed with no-ack: each arrival minus the due
   time the broker gave it (read back through ``GET …/delayed``, whose ids are its keys),
   so the client's own publishing speed does not count. The consumer is the load
   generator's raw one (``loadgen_peers.Consumer``), arrival the time its read of the
   delivery began: aiormq reads about 9,400 deliveries a second on a 2-core VM, under
   the 10,000 due per second measured, so its growing backlog would count as the broker's
   lateness.

Publishes use the load generator's pipelined confirm publisher (``loadgen_peers``, window
2,000) with 100-byte bodies.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from base64 import b64encode
from pathlib import Path

import aiormq
import pamqp.commands as cmd
from loadgen_client import connect, open_channel
from loadgen_peers import ConfirmPublisher, Consumer, encode_publish
from loadgen_proc import dir_size, vm_kib

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT.parent))
from leveret.node import ready_file  # noqa: E402

BODY = b"x" * 100
HOUR_MS = 3_600_000


class Broker:
    def __init__(self, data_dir: Path, log: Path) -> None:
        self.data_dir, self.log = data_dir, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = self.http = self.prometheus = 0

    def start(self) -> float:
        ready = self.data_dir.parent / "ready.json"
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port", "0",
             "--management-host", "127.0.0.1", "--management-port", "0",
             "--prometheus-port", "0", "--data-dir", str(self.data_dir),
             "--log-level", "warning", "--ready-file", str(ready)],
            stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        doc = ready_file.wait(ready, self.proc, 600)
        if doc is None:
            raise RuntimeError("broker did not start: " + self.log.read_text()[-2000:])
        self.port, self.http = doc["amqp"] or 0, doc["management"] or 0
        self.prometheus = doc["prometheus"] or 0
        return time.perf_counter() - t0

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(600)

    def cpu_s(self) -> float:
        """The broker's CPU seconds so far (user + system, all threads)."""
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def lateness_buckets(self) -> list[tuple[float, int]]:
        """The broker's release-lateness histogram: (le seconds, cumulative count)."""
        url = f"http://127.0.0.1:{self.prometheus}/metrics"
        with urllib.request.urlopen(url, timeout=600) as answer:
            text = answer.read().decode()
        prefix = 'leveret_delayed_release_lateness_seconds_bucket{le="'
        return [(float(line[len(prefix):].split('"')[0]), int(line.rsplit(" ", 1)[1]))
                for line in text.splitlines() if line.startswith(prefix)]

    def rss_mib(self) -> float:
        assert self.proc is not None
        return round((vm_kib(self.proc.pid, "VmRSS") or 0) / 1024, 1)

    def api(self, path: str, method: str = "GET") -> tuple[float, object]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.http}/api{path}", method=method)
        req.add_header("Authorization", "Basic " + b64encode(b"guest:guest").decode())
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=600) as answer:
            body = answer.read()
        return time.perf_counter() - t0, json.loads(body) if body else None


class SequencePublisher(ConfirmPublisher):
    """``ConfirmPublisher`` sending each of its frames once, in order (not cycling)."""

    def _frames(self, n: int) -> bytes:
        start = getattr(self, "published", 0)  # 0 while the base __init__ runs
        return b"".join(self.cycle[start:start + n])

    @property  # type: ignore[override]
    def payload(self) -> bytes:  # what ``run`` writes for a whole batch: the next one
        return self._frames(self.batch)

    @payload.setter
    def payload(self, _value: bytes) -> None:
        pass


class RssPeak:
    """The broker's VmRSS sampled every 0.2 s on a thread, for the peak."""

    def __init__(self, broker: Broker) -> None:
        self.broker, self.peak, self._stop = broker, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, self.broker.rss_mib())

    def __enter__(self) -> RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def declare(port: int, exchange: str, type_: str, args: dict, queue: str) -> None:
    conn = await aiormq.connect(f"amqp://guest:guest@127.0.0.1:{port}/")
    ch = await conn.channel()
    await ch.exchange_declare(exchange, exchange_type=type_, durable=True, arguments=args)
    await ch.queue_declare(queue, durable=True)
    await ch.queue_bind(queue, exchange, routing_key="k")
    await conn.close()


async def publish_confirmed(port: int, exchange: str, count: int, headers: dict | None
                            ) -> float:
    """Publish ``count`` persistent messages, every confirm awaited; messages per second."""
    conn = await connect("127.0.0.1", port, "guest", "guest", "/", "bench-delayed")
    await open_channel(conn, 1)
    conn.send(cmd.Confirm.Select(), 1)
    await conn.expect(cmd.Confirm.SelectOk)
    one = encode_publish(exchange, "k", BODY,
                         properties=cmd.Basic.Properties(delivery_mode=2, headers=headers))
    pub = ConfirmPublisher(conn, one, 100, 2000, limit=count, stall_timeout=600)
    t0 = time.perf_counter()
    await pub.run()
    await pub.wait_all()
    wall = time.perf_counter() - t0
    if pub.error or pub.confirmed != count:
        raise RuntimeError(f"publish failed: {pub.error} ({pub.confirmed}/{count} confirmed)")
    conn.transport.close()
    return count / wall


async def lateness(broker: Broker, rate: int, seconds: int, lead_s: float) -> dict:
    port = broker.port
    ex, queue = f"lx{rate}", f"lq{rate}"
    await declare(port, ex, "x-delayed-message", {"x-delayed-type": "direct"}, queue)
    total = rate * seconds
    # Pre-encoded, each with its own delay, written by the pipelined confirm publisher: the
    # schedule is in place well before the first due time even on a slow client.
    first_due = time.time() * 1000 + lead_s * 1000
    frames = [encode_publish(ex, "k", b"%d" % i, properties=cmd.Basic.Properties(
        delivery_mode=2, headers={"x-delay": int(first_due + i * 1000 / rate
                                                 - time.time() * 1000)}))
              for i in range(total)]
    conn = await connect("127.0.0.1", port, "guest", "guest", "/", "bench-lateness")
    await open_channel(conn, 1)
    conn.send(cmd.Confirm.Select(), 1)
    await conn.expect(cmd.Confirm.SelectOk)
    pub = SequencePublisher(conn, frames, 100, 2000, limit=total, stall_timeout=600)
    await pub.run()
    await pub.wait_all()
    conn.transport.close()
    # The broker's own due times (the listing's ids are due-ordered keys): lateness is
    # measured against them, not against what the client meant.
    due: dict[bytes, int] = {}
    after = -1
    while len(due) < total:
        page = broker.api(f"/exchanges/%2F/{ex}/delayed?count=10000&after={after}")[1]
        messages = page["messages"]  # type: ignore[index]
        if not messages:
            break
        for m in messages:
            due[m["payload"].encode()] = m["due"]
        after = int(messages[-1]["id"])
    listed_ms_before_first_due = round(min(due.values()) - time.time() * 1000)
    cconn = await connect("127.0.0.1", port, "guest", "guest", "/", "bench-lateness-consumer")
    await open_channel(cconn, 1)
    cconn.send(cmd.Basic.Qos(prefetch_count=5000), 1)
    await cconn.expect(cmd.Basic.QosOk)
    consumer = Consumer(cconn, 1, True, 0)
    consumer.bodies = []
    consumer.install()
    cconn.send(cmd.Basic.Consume(queue=queue, consumer_tag="lateness", no_ack=True), 1)
    await cconn.expect(cmd.Basic.ConsumeOk)
    await asyncio.sleep(max(0.0, (min(due.values()) - time.time() * 1000) / 1000 - 1))
    cpu0, t0, hist0 = broker.cpu_s(), time.perf_counter(), broker.lateness_buckets()
    await asyncio.wait_for(consumer.wait_count(total), lead_s + seconds + 600)
    while len(consumer.bodies) < total:  # the last body may follow its deliver's read
        await asyncio.sleep(0.01)
    cpu, wall = broker.cpu_s() - cpu0, time.perf_counter() - t0
    arrivals = [at * 1000 - due.get(body, 0) for at, body in consumer.bodies]
    # The broker's own view: released how long after due (its histogram's buckets), apart
    # from how fast this client reads.
    hist = [(le, n - n0) for (le, n), (_, n0) in zip(broker.lateness_buckets(), hist0,
                                                      strict=True)]

    def quantile(q: float) -> str:
        for le, n in hist:
            if n >= q * hist[-1][1]:
                return f"<= {le * 1000:g} ms"
        return "?"

    cconn.transport.close()
    ordered = sorted(arrivals)
    return {"due_per_s": rate, "seconds": seconds, "messages": total,
            "scheduled_by_broker": len(due),
            "listed_ms_before_first_due": listed_ms_before_first_due,
            "lateness_ms_p50": round(ordered[len(ordered) // 2], 1),
            "lateness_ms_p99": round(ordered[int(len(ordered) * 0.99)], 1),
            "lateness_ms_max": round(ordered[-1], 1),
            "early": sum(1 for a in ordered if a < 0),
            "broker_release_lateness_p50": quantile(0.5),
            "broker_release_lateness_p99": quantile(0.99),
            "broker_cpu_us_per_release": round(cpu / total * 1e6, 1),
            "broker_cpu_share": round(cpu / wall, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--no-plain", action="store_true",
                    help="delayed rounds only (RSS growth of the schedule alone)")
    ap.add_argument("--due-rate", type=int, nargs="+", default=[10_000, 2_000],
                    help="one lateness phase per rate (messages falling due per second)")
    ap.add_argument("--due-seconds", type=int, default=5)
    ap.add_argument("--lead-seconds", type=float, default=20.0,
                    help="first due time this far after the lateness phase starts publishing")
    ap.add_argument("--dir", default=None, help="where the broker's data dir goes")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="leveret-delayed-", dir=args.dir))
    broker = Broker(base / "data", base / "broker.log")
    broker.start()
    n = args.messages
    out: dict = {"messages": n, "body_bytes": len(BODY), "data_dir": str(base)}
    try:
        asyncio.run(declare(broker.port, "px", "direct", {}, "pq"))
        asyncio.run(declare(broker.port, "dx", "x-delayed-message",
                            {"x-delayed-type": "direct"}, "dq"))
        # Rounds of plain then delayed, so that a machine whose load changes (other work on
        # a shared host) weighs on both alike; the schedule grows to N over the rounds.
        plain, delayed, per_round = [], [], n // args.rounds
        cpu = {"plain": 0.0, "delayed": 0.0}
        out["rss_before_mib"] = broker.rss_mib()
        with RssPeak(broker) as peak:
            for _ in range(args.rounds):
                if not args.no_plain:
                    before = broker.cpu_s()
                    plain.append(asyncio.run(publish_confirmed(broker.port, "px", per_round,
                                                               None)))
                    cpu["plain"] += broker.cpu_s() - before
                    broker.api("/queues/%2F/pq/contents", "DELETE")
                before = broker.cpu_s()
                delayed.append(asyncio.run(publish_confirmed(
                    broker.port, "dx", per_round, {"x-delay": HOUR_MS})))
                cpu["delayed"] += broker.cpu_s() - before
        out["broker_cpu_us_per_publish"] = {
            k: round(v / n * 1e6, 1) for k, v in cpu.items() if v}
        out["plain_per_s_rounds"] = [round(r) for r in plain]
        out["delayed_per_s_rounds"] = [round(r) for r in delayed]
        out["delayed_per_s"] = round(statistics.median(delayed))
        if plain:
            out["plain_per_s"] = round(statistics.median(plain))
            out["delayed_vs_plain"] = round(out["delayed_per_s"] / out["plain_per_s"], 3)
        time.sleep(2)
        out["rss_after_mib"] = broker.rss_mib()
        out["rss_peak_mib"] = peak.peak
        out["rss_growth_mib"] = round(max(peak.peak, out["rss_after_mib"])
                                      - out["rss_before_mib"], 1)
        times = []
        for _ in range(20):
            took, doc = broker.api("/exchanges/%2F/dx")
            times.append(took)
        out["exchange_get_ms_median"] = round(statistics.median(times) * 1000, 2)
        out["exchange_get_ms_max"] = round(max(times) * 1000, 2)
        out["messages_delayed"] = doc["messages_delayed"]  # type: ignore[index]
        times = [broker.api("/exchanges/%2F/dx/delayed?count=100")[0] for _ in range(20)]
        out["listing_100_ms_median"] = round(statistics.median(times) * 1000, 2)
        out["listing_100_ms_max"] = round(max(times) * 1000, 2)
        out["data_dir_mib"] = round((dir_size(str(base / "data")) or {}).get("disk_bytes", 0)
                                    / 2**20, 1)
        broker.stop()
        out["restart_s"] = round(broker.start(), 2)
        out["messages_delayed_after_restart"] = broker.api("/exchanges/%2F/dx")[1][
            "messages_delayed"]  # type: ignore[index]
        out["rss_after_restart_mib"] = broker.rss_mib()
        out["lateness"] = [asyncio.run(lateness(broker, rate, args.due_seconds,
                                                args.lead_seconds))
                           for rate in args.due_rate]
    finally:
        if broker.proc is not None and broker.proc.poll() is None:
            broker.stop()
    print(json.dumps(out))
    if os.environ.get("KEEP_DATA") != "1":
        import shutil
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
