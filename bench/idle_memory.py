#!/usr/bin/env python3
"""An idle broker's memory after a burst: a backlog published, drained, its queue deleted.

Starts ``python -m leveret serve`` (``PYTHONPATH`` chooses the build) on free ports, publishes
``--messages`` transient 1 KB messages to one queue with pika, consumes them all, deletes the
queue, then prints the broker's VmRSS, RssAnon and VmHWM (MiB) at each ``--after`` second:

    python bench/idle_memory.py --messages 100000 --after 2 5 15 25
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pika

from leveret.node import ready_file


def memory(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "VmHWM"):
            out[key] = int(value.split()[0]) // 1024
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--after", type=float, nargs="+", default=[2, 5, 15, 25])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="leveret-idle-") as tmp:
        ready = Path(tmp) / "ready.json"
        broker = subprocess.Popen(
            [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port", "0",
             "--management-port", "0", "--prometheus-port", "0", "--data-dir",
             os.path.join(tmp, "data"), "--ready-file", str(ready), "--log-level", "warning"])
        try:
            info = ready_file.wait(ready, broker, 300)
            if info is None:
                raise SystemExit("the broker did not start")
            conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", info["amqp"]))
            ch = conn.channel()
            ch.queue_declare("burst")
            body = b"x" * 1024
            for _ in range(args.messages):
                ch.basic_publish("", "burst", body)
            print("published", memory(broker.pid), flush=True)
            got = 0
            for method, _, _ in ch.consume("burst", auto_ack=True, inactivity_timeout=60):
                if method is None:
                    break
                got += 1
                if got == args.messages:
                    break
            ch.cancel()
            ch.queue_delete("burst")
            conn.close()
            print(f"drained {got}, queue deleted", memory(broker.pid), flush=True)
            start = time.monotonic()
            for after in args.after:
                time.sleep(max(0.0, start + after - time.monotonic()))
                print(f"idle {after:g} s", memory(broker.pid), flush=True)
        finally:
            broker.terminate()
            broker.wait()


if __name__ == "__main__":
    main()
