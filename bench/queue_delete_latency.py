#!/usr/bin/env python3
"""A second publisher's confirm latency while a deep durable queue is deleted.

A deleted queue's stored messages used to go in the transaction that deleted it, and
LMDB's one writer held every other commit behind it; now they go in slices
(``persistence/lmdb_drops.py``). This measures what another publisher sees: a Leveret
(``PYTHONPATH`` chooses the build) gets ``--messages`` persistent 256-byte messages in a
durable queue, then a second connection publishes to another durable queue with
confirms, one message at a time, while the deep queue is deleted. Printed as JSON:
seconds to ``queue.delete-ok`` and until the queue is written off (the broker's log
line; a build without slices has written it off at its delete-ok), and the confirm
latencies (p50, p99, max, ms) before and during the deletion.

    python bench/queue_delete_latency.py --messages 1000000
    PYTHONPATH=/tmp/pkg-base python bench/queue_delete_latency.py ...   # another build
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pamqp.commands as cmd
import pamqp.frame
from pamqp import commands
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen_client import connect, open_channel  # bench/ is not a package

from leveret.node import ready_file

BODY = b"x" * 256
CHUNK = 2000  # publishes written per drain of the socket
WRITTEN_OFF = b"written off"
SAMPLES_BEFORE = 300


def publish_frames(queue: str, channel: int) -> bytes:
    """One persistent publish to ``queue`` (method, header, body), marshalled once."""
    props = commands.Basic.Properties(delivery_mode=2)
    return (pamqp.frame.marshal(cmd.Basic.Publish(exchange="", routing_key=queue), channel)
            + pamqp.frame.marshal(ContentHeader(0, len(BODY), props), channel)
            + pamqp.frame.marshal(ContentBody(BODY), channel))


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"n": len(values), "p50_ms": round(pick(0.5) * 1e3, 2),
            "p99_ms": round(pick(0.99) * 1e3, 2), "max_ms": round(ordered[-1] * 1e3, 2)}


async def fill(url_port: int, count: int) -> None:
    conn = await connect("127.0.0.1", url_port, "guest", "guest", name="fill")
    await open_channel(conn, 1)
    conn.send(cmd.Queue.Declare(queue="deep", durable=True), 1)
    await conn.expect(cmd.Queue.DeclareOk)
    frames = publish_frames("deep", 1)
    sent = 0
    while sent < count:
        n = min(CHUNK, count - sent)
        conn.transport.write(frames * n)
        sent += n
        await conn.wait_writable()
        await asyncio.sleep(0)
    while True:  # until the broker holds them all (state, not a sleep of a guessed length)
        conn.send(cmd.Queue.Declare(queue="deep", durable=True, passive=True), 1)
        ok = await conn.expect(cmd.Queue.DeclareOk, timeout=600)
        if ok.message_count >= count:
            break
        await asyncio.sleep(0.5)
    await conn.close()


async def measure(port: int, log_path: Path, sliced: bool) -> dict[str, object]:
    pub = await connect("127.0.0.1", port, "guest", "guest", name="confirmed publisher")
    await open_channel(pub, 1)
    pub.send(cmd.Queue.Declare(queue="other", durable=True), 1)
    await pub.expect(cmd.Queue.DeclareOk)
    pub.send(cmd.Confirm.Select(), 1)
    await pub.expect(cmd.Confirm.SelectOk)
    frames = publish_frames("other", 1)
    phase = ["before"]
    latencies: dict[str, list[float]] = {"before": [], "during": [], "after": []}
    stop = asyncio.Event()

    async def publisher() -> None:
        while not stop.is_set():
            sent_in, start = phase[0], time.perf_counter()  # counted where it was sent
            pub.transport.write(frames)
            await pub.expect(cmd.Basic.Ack, timeout=600)
            latencies[sent_in].append(time.perf_counter() - start)

    task = asyncio.create_task(publisher())
    while len(latencies["before"]) < SAMPLES_BEFORE:
        await asyncio.sleep(0.05)
    admin = await connect("127.0.0.1", port, "guest", "guest", name="admin")
    await open_channel(admin, 1)
    offset = log_path.stat().st_size
    started = time.perf_counter()
    phase[0] = "during"
    admin.send(cmd.Queue.Delete(queue="deep"), 1)
    ok = await admin.expect(cmd.Queue.DeleteOk, timeout=3600)
    delete_ok = time.perf_counter() - started
    if sliced:
        while True:
            with open(log_path, "rb") as f:
                f.seek(offset)
                if WRITTEN_OFF in f.read():
                    break
            await asyncio.sleep(0.01)
    written_off = time.perf_counter() - started
    phase[0] = "after"
    await asyncio.sleep(1)
    stop.set()
    await task
    await admin.close()
    await pub.close()
    return {"deleted": ok.message_count, "delete_ok_s": round(delete_ok, 3),
            "written_off_s": round(written_off, 3),
            "before": percentiles(latencies["before"]),
            "during": percentiles(latencies["during"]),
            "after": percentiles(latencies["after"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    args = parser.parse_args()
    try:
        import leveret.persistence.lmdb_drops  # noqa: F401
        sliced = True
    except ImportError:
        sliced = False
    with tempfile.TemporaryDirectory(prefix="leveret-qdel-") as tmp:
        work = Path(tmp)
        ready, log_path = work / "ready.json", work / "broker.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port",
                 "0", "--management-host", "127.0.0.1", "--management-port", "0",
                 "--prometheus-port", "0", "--data-dir", str(work / "data"),
                 "--ready-file", str(ready)], stdout=log, stderr=subprocess.STDOUT)
            try:
                document = ready_file.wait(ready, proc, 120)
                if document is None:
                    raise SystemExit("the broker did not start")
                port = int(document["amqp"])
                t0 = time.perf_counter()
                asyncio.run(fill(port, args.messages))
                filled = time.perf_counter() - t0
                result = asyncio.run(measure(port, log_path, sliced))
            finally:
                proc.terminate()
                proc.wait(60)
    print(json.dumps({"messages": args.messages, "sliced": sliced, "fill_s": round(filled, 1),
                      **result}))


if __name__ == "__main__":
    main()
