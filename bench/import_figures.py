"""A large definitions import: how long it holds the broker's loop, and its memory peak.

Starts a broker on a fresh data dir, posts ``--queues`` durable queues to
``POST /api/definitions``, and while the request is pending an AMQP client
repeats a cheap round trip (a passive ``exchange.declare``): the longest wait
for one is how long the loop was held. Memory is the broker's resident set
before the import, its peak (``VmHWM``), and its resident set once answered
(what the imported queues keep). One JSON object on stdout::

    python bench/import_figures.py --queues 100000
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pika

PORTS = {"amqp": re.compile(r"listening for AMQP 0-9-1 on 127\.0\.0\.1:(\d+)"),
         "http": re.compile(r"listening for HTTP management API on 127\.0\.0\.1:(\d+)")}


def start(data_dir: Path, log_path: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port", "0",
         "--management-host", "127.0.0.1", "--management-port", "0", "--prometheus-port", "0",
         "--management-tls-port", "0", "--data-dir", str(data_dir)],
        stdout=log, stderr=subprocess.STDOUT)
    while True:
        text = log_path.read_text(errors="replace")
        if "Leveret started (" in text:
            found = {k: int(m.group(1)) for k, r in PORTS.items() if (m := r.search(text))}
            return proc, found["amqp"], found["http"]
        if proc.poll() is not None:
            raise SystemExit(f"broker did not start:\n{text}")
        time.sleep(0.05)


def memory_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queues", type=int, default=100_000)
    args = parser.parse_args()
    defs = {"queues": [{"name": f"q-{i}", "vhost": "/", "durable": True, "auto_delete": False,
                        "arguments": {}} for i in range(args.queues)]}
    body = json.dumps(defs).encode()
    with tempfile.TemporaryDirectory() as tmp:
        proc, amqp_port, http_port = start(Path(tmp) / "data", Path(tmp) / "broker.log")
        try:
            channel = pika.BlockingConnection(
                pika.ConnectionParameters("127.0.0.1", amqp_port)).channel()
            rss_before = memory_kb(proc.pid, "VmRSS")
            done = threading.Event()
            gaps: list[float] = []

            def probe() -> None:
                while not done.is_set():
                    began = time.perf_counter()
                    channel.exchange_declare("amq.direct", passive=True)
                    gaps.append(time.perf_counter() - began)

            request = urllib.request.Request(
                f"http://127.0.0.1:{http_port}/api/definitions", body, method="POST",
                headers={"Content-Type": "application/json", "Authorization": "Basic "
                         + base64.b64encode(b"guest:guest").decode()})
            prober = threading.Thread(target=probe)
            began = time.perf_counter()
            prober.start()
            with urllib.request.urlopen(request, timeout=600) as resp:
                status = resp.status
            took = time.perf_counter() - began
            done.set()
            prober.join()
            print(json.dumps({
                "queues": args.queues, "status": status, "body_mb": round(len(body) / 2**20, 1),
                "import_seconds": round(took, 2),
                "longest_round_trip_seconds": round(max(gaps), 3),
                "round_trips_during_import": len(gaps),
                "rss_before_mb": round(rss_before / 1024),
                "rss_peak_mb": round(memory_kb(proc.pid, "VmHWM") / 1024),
                "rss_after_mb": round(memory_kb(proc.pid, "VmRSS") / 1024),
            }))
        finally:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
