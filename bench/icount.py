#!/usr/bin/env python3
"""Broker instructions per message, under callgrind: a load-independent A/B measure.

Wall-clock CPU per message moves with whatever else the machine runs; the number of
instructions the broker executes for a fixed workload does not (much). This runs a
Leveret under ``valgrind --tool=callgrind`` twice, once for ``--messages`` and once for
twice that many, with the ``transient`` or ``confirmed`` workload of ``loadgen.py``
(one publisher and one consumer connection, 256-byte bodies, one ``basic.ack`` per
message; ``confirmed``: persistent messages to a durable queue with publisher
confirms), or ``relay`` (the Spark pipeline's broker work: a backlog of 1 KB persistent
messages filled, then consumed 5,000 at a time, each republished with confirms to a second
durable queue and the batch acked; ``relay_workload.py``), and prints the difference divided by the extra messages: startup,
handshakes and shutdown cancel out.

    python bench/icount.py --scenario transient --messages 20000
    PYTHONPATH=/tmp/pkg-base python bench/icount.py ...   # another build of leveret
    python bench/icount.py --scenario transient --trace   # with message tracing on
    python bench/icount.py --keep /tmp/cg    # callgrind outputs kept: diff the two runs'
                                             # callgrind_annotate listings to profile

The broker is started as ``python -m leveret serve`` with this process's environment,
so ``PYTHONPATH`` chooses the build. ``--trace`` turns message tracing on for vhost
"/" (``PUT /api/traces/%2F``, every queue, capacity 10,000) before the workload, so the
difference is what tracing costs per message. ``stream`` publishes 1 KB messages with
confirms to a stream queue from ``stream_publishers.py``'s processes, then ``--readers``
consumers each read the whole log from ``first`` (``stream_rates.read_raw``): with
``--readers 0`` the figure is a stream publish, and the difference between two reader
counts divided by their difference is a stream delivery. Only the broker's own instructions are counted
(``--trace-children=no``); its group-commit thread is included.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import pamqp.commands as cmd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loadgen_client  # bench/ is not a package: found through sys.path above
import loadgen_peers
import relay_workload  # the Spark pipeline's broker work, without Spark
import stream_rates
from callgrind import callgrind_instructions, lmdb_capped

RELAY_BATCH = 5000  # deliveries per relayed batch (a Spark trigger's worth)
# Startup under callgrind (CPython imports, LMDB open) takes a minute on a loaded 2-CPU VM.
START_TIMEOUT = 600.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"broker exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"broker not listening on {port} after {timeout:.0f} s")


async def transient(port: int, messages: int, confirmed: bool) -> None:
    """Publish ``messages`` while one consumer acks each delivery; return when all are in."""
    qname = f"icount-{uuid.uuid4().hex[:8]}"
    cconn = await loadgen_client.connect("127.0.0.1", port, "guest", "guest", "/", "icount-consumer")
    await loadgen_client.open_channel(cconn, 1)
    cconn.send(cmd.Queue.Declare(queue=qname, durable=confirmed), 1)
    await cconn.expect(cmd.Queue.DeclareOk, timeout=120)
    consumer = loadgen_peers.Consumer(cconn, 1, False, 0)
    consumer.install()
    cconn.send(cmd.Basic.Consume(queue=qname, consumer_tag="icount"), 1)
    await cconn.expect(cmd.Basic.ConsumeOk, timeout=120)
    pconn = await loadgen_client.connect("127.0.0.1", port, "guest", "guest", "/", "icount-producer")
    await loadgen_client.open_channel(pconn, 1)
    body = (b"leveret-bench" * 20)[:256]
    props = cmd.Basic.Properties(delivery_mode=2) if confirmed else None
    one = loadgen_peers.encode_publish("", qname, body, properties=props)
    batch = 50
    if confirmed:
        pconn.send(cmd.Confirm.Select(), 1)
        await pconn.expect(cmd.Confirm.SelectOk, timeout=120)
        pub = loadgen_peers.ConfirmPublisher(pconn, one, batch, window=1000, limit=messages,
                                       stall_timeout=600)
        task = asyncio.create_task(pub.run())
    else:
        write = pconn.transport.write
        sent = 0
        while sent < messages:
            if pconn.paused:
                await pconn.wait_writable()
                continue
            n = min(batch, messages - sent)
            write(one * n)
            sent += n
            await asyncio.sleep(0)
        task = None
    await asyncio.wait_for(consumer.wait_count(messages), timeout=3600)
    if task is not None:
        await asyncio.wait_for(task, timeout=600)
    cconn.send(cmd.Queue.Delete(queue=qname), 1)
    await cconn.expect(cmd.Queue.DeleteOk, timeout=120)
    await pconn.close(timeout=60)
    await cconn.close(timeout=60)


def relay_run(port: int, messages: int) -> None:
    """The Spark pipeline's broker work (``relay_workload.py``): fill a durable
    queue with ``messages`` persistent 1 KB messages (most of them paged out to the store),
    then take them 5,000 at a time, republish each with confirms, and ack each batch."""
    url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
    relay_workload.declare_queues(url)
    relay_workload.fill_with_client(url, messages, 1024)
    relay_workload.relay(url, messages, RELAY_BATCH, 1024)


def stream_run(port: int, messages: int, readers: int) -> None:
    """Publish ``messages`` x 1 KB with confirms to a new stream, then ``readers``
    consumers (one process each, at once) each read all of it from ``first``."""
    url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
    name = f"icount-stream-{uuid.uuid4().hex[:8]}"
    stream_rates.PUBLISHERS[0] = 2  # two publishing processes, as few as keep it busy
    asyncio.run(stream_rates.publish(url, name, messages, 1024))
    if readers:
        asyncio.run(stream_rates.consume(url, name, messages, readers))


def start_tracing(port: int, proc: subprocess.Popen[bytes]) -> None:
    """``PUT /api/traces/%2F`` on the broker's management listener (waits for it)."""
    wait_for_port(port, proc, START_TIMEOUT)
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/traces/%2F", method="PUT",
        data=json.dumps({"capacity": 10_000}).encode(),
        headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode(),
                 "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        resp.read()


def run_once(messages: int, scenario: str, out_dir: Path, trace: bool = False,
             readers: int = 0) -> int:
    """Instructions the broker executed from start to exit, for ``messages``."""
    port = free_port()
    data_dir = out_dir / f"data-{messages}-{uuid.uuid4().hex[:6]}"
    out_file = out_dir / f"callgrind-{messages}-{uuid.uuid4().hex[:6]}.out"
    mgmt_port = free_port()

    def workload(broker: subprocess.Popen[bytes]) -> None:
        wait_for_port(port, broker, START_TIMEOUT)
        if trace:
            start_tracing(mgmt_port, broker)
        if scenario == "relay":
            relay_run(port, messages)
        elif scenario == "stream":
            stream_run(port, messages, readers)
        else:
            asyncio.run(transient(port, messages, scenario == "confirmed"))

    with open(out_dir / "broker.log", "ab") as log:
        return callgrind_instructions(
            [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port",
             str(port), "--data-dir", str(data_dir), "--log-level", "warning",
             "--prometheus-port", "0", "--management-port", str(mgmt_port)],
            out_file, env=lmdb_capped(out_dir), cwd=out_dir, stderr=log,
            while_running=workload)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=("transient", "confirmed", "relay", "stream"),
                        default="transient")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--trace", action="store_true",
                        help="message tracing on for vhost / during the workload")
    parser.add_argument("--readers", type=int, default=0,
                        help="stream: consumers reading the whole log after the publish")
    parser.add_argument("--repeat", type=int, default=1, help="pairs of runs (N, 2N)")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="keep the callgrind outputs in DIR (for callgrind_annotate)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="leveret-icount-") as tmp:
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            tmp = str(args.keep)
        per_message = []
        for _ in range(args.repeat):
            small = run_once(args.messages, args.scenario, Path(tmp), args.trace, args.readers)
            large = run_once(2 * args.messages, args.scenario, Path(tmp), args.trace,
                             args.readers)
            per_message.append((large - small) / args.messages)
            print(json.dumps({"scenario": args.scenario, "trace": args.trace, "messages": args.messages,
                              "readers": args.readers,
                              "instructions_small": small, "instructions_large": large,
                              "instructions_per_message": round(per_message[-1])}),
                  flush=True)
    if len(per_message) > 1:
        per_message.sort()
        print(f"median instructions per message: {per_message[len(per_message) // 2]:.0f}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")  # the broker inherits it: same dict layouts
    main()
