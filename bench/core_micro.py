#!/usr/bin/env python3
"""The sans-IO hot path alone: publish -> route -> enqueue -> deliver -> ack, no sockets.

Two in-memory connections on one ``Broker``: a publisher fed ``--batch`` pre-encoded
publishes per ``receive_data`` call, and a consumer that acks every delivery with one
``basic.ack`` each, as ``loadgen.py`` does. Without the event loop and the kernel, the
figure is the protocol core's own cost; under callgrind it is repeatable to a few tenths
of a percent, so two builds compare without a quiet machine:

    python bench/core_micro.py --messages 100000                 # µs per message (CPU)
    valgrind --tool=callgrind python bench/core_micro.py --messages 5000 --once
    valgrind --tool=callgrind python bench/core_micro.py --messages 10000 --once
    # (second total - first total) / 5000 = instructions per message

``PYTHONPATH`` chooses the build (a directory with a ``leveret`` symlink to a checkout);
it runs on 17aecdf, where the broker still lived in ``leveret.amqp.broker``.
"""

from __future__ import annotations

import argparse
import importlib
import struct
import time
from typing import Any

from pamqp import body as pbody
from pamqp import commands, frame
from pamqp import header as pheader

from leveret.amqp.connection import Connection
from leveret.config import Config

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
ACK = struct.Struct(">BHIHHQBB")


def broker_class() -> Any:
    for name in ("leveret.broker.broker", "leveret.amqp.broker"):  # now, and at 17aecdf
        try:
            return importlib.import_module(name).Broker
        except ImportError:
            continue
    raise SystemExit("no leveret Broker found")


def open_connection(broker: Any, config: Config) -> Connection:
    conn = Connection(broker, config, ("127.0.0.1", 5000), lambda: None)
    conn.receive_data(PROTOCOL_HEADER)
    for method in (commands.Connection.StartOk(client_properties={"product": "core_micro"},
                                               mechanism="PLAIN", response="\x00guest\x00guest",
                                               locale="en_US"),
                   commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=0),
                   commands.Connection.Open(virtual_host="/")):
        conn.receive_data(frame.marshal(method, 0))
    conn.receive_data(frame.marshal(commands.Channel.Open(), 1))
    conn.data_to_send()
    return conn


def turn(conn: Connection, data: bytes) -> None:
    conn.receive_data(data)
    while getattr(conn, "input_pending", False):  # no budget at 17aecdf
        conn.receive_data(b"")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=50, help="publishes per receive_data")
    parser.add_argument("--once", action="store_true",
                        help="one pass of --messages, no timing (for callgrind)")
    args = parser.parse_args()
    config = Config()
    broker = broker_class()(config)
    consumer, publisher = open_connection(broker, config), open_connection(broker, config)
    consumer.receive_data(frame.marshal(commands.Queue.Declare(queue="q"), 1))
    consumer.receive_data(frame.marshal(commands.Basic.Consume(queue="q", consumer_tag="t"), 1))
    consumer.data_to_send()
    body = b"x" * 256
    one = (frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
           + frame.marshal(pheader.ContentHeader(0, len(body), commands.Basic.Properties()), 1)
           + frame.marshal(pbody.ContentBody(body), 1))
    batch = args.batch
    payload = one * batch
    acked = 0

    def run(messages: int) -> None:
        nonlocal acked
        for _ in range(messages // batch):
            turn(publisher, payload)
            publisher.data_to_send()
            if not consumer.data_to_send():
                raise SystemExit("no deliveries")
            turn(consumer, b"".join([ACK.pack(1, 1, 13, 60, 80, tag, 0, 0xCE)
                                     for tag in range(acked + 1, acked + batch + 1)]))
            acked += batch
            consumer.data_to_send()

    run(2_000 if args.once else 20_000)  # warm up
    if args.once:
        run(args.messages)
        return
    times = []
    for _ in range(5):
        start = time.process_time()
        run(args.messages)
        times.append((time.process_time() - start) / args.messages * 1e6)
    times.sort()
    print(f"{times[2]:.3f} us/msg CPU, median of 5 (min {times[0]:.3f})")


if __name__ == "__main__":
    main()
