"""Hundreds of consumers on one channel: how long the consume takes, and how long another
client waits to connect meanwhile.

    python bench/many_consumers.py                   # a Leveret started here, 3 rounds
    python bench/many_consumers.py --url amqp://guest:guest@127.0.0.1:5672/%2F   # RabbitMQ

One pika channel with ``basic_qos(10)`` and 300 consumers on one queue holding twice what
their windows take, acked one by one: before the consumer ring every ack resumed every
consumer of the channel and each resume scanned every consumer (O(C^2) an ack; 30 s for
this run, and a second client could not connect). ``tests/integration/
test_many_consumers.py`` checks what must happen (all consumed, round-robin, another client
gets in); these are the times, which a test cannot assert on a machine doing other work.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pika
from broker_proc import start_leveret

CONSUMERS = 300
PREFETCH = 10
MESSAGES = 6_000


def one_round(url: str) -> tuple[float, float]:
    """(seconds to consume MESSAGES, seconds another client took to connect meanwhile)."""
    params = pika.URLParameters(url)
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    q = f"many-{uuid.uuid4().hex[:8]}"
    ch.queue_declare(q, auto_delete=True)
    for i in range(MESSAGES):
        ch.basic_publish("", q, b"m%d" % i)
    ch.basic_qos(prefetch_count=PREFETCH)
    got = [0]

    def on_message(channel, method, _props, _body) -> None:  # type: ignore[no-untyped-def]
        got[0] += 1
        channel.basic_ack(method.delivery_tag)

    for _ in range(CONSUMERS):
        ch.basic_consume(q, on_message)
    connect: list[float] = []

    def connect_meanwhile() -> None:
        started = time.monotonic()
        pika.BlockingConnection(params).close()
        connect.append(time.monotonic() - started)

    prober: threading.Thread | None = None
    started = time.monotonic()
    while got[0] < MESSAGES:
        conn.process_data_events(time_limit=0.05)
        if prober is None and got[0] >= CONSUMERS * PREFETCH:
            prober = threading.Thread(target=connect_meanwhile, daemon=True)
            prober.start()
    elapsed = time.monotonic() - started
    if prober is not None:
        prober.join()
    conn.close()
    return elapsed, connect[0] if connect else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="a broker to measure; default: start a Leveret here")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    proc, url = (None, args.url) if args.url else start_leveret(Path(tempfile.mkdtemp()))[:2]
    try:
        results = [one_round(url) for _ in range(args.rounds)]
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()
    for name, values in (("consume", [r[0] for r in results]),
                         ("connect meanwhile", [r[1] for r in results])):
        print(f"{name:>17}: {statistics.median(values):.2f} s median "
              f"({', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main()
