"""What a deduplication window costs confirmed publishing: a plain exchange against one
whose durable window holds a million keys, same broker, same messages.

    python bench/dedupe_cost.py --window 1000000 --messages 100000 --rounds 9

One fresh Leveret (run.py's LeveretProcess). Setup: a durable queue bound to two durable
fanout exchanges (``plain`` and ``plain2``) and to a durable ``x-message-deduplication``
exchange with ``x-cache-size`` = ``--window``, whose window is filled with ``--window``
distinct keys (confirmed, then the queue purged). Each round publishes ``--messages``
persistent messages with publisher confirms (pipelined: ``--window-confirms`` unconfirmed
at most), every one with a fresh ``x-deduplication-header`` key, to ``plain``, then the
window, then ``plain2``, and purges the queue after each run. The arms send the same bytes
but for the exchange name, so the difference is the window: the lookup, the insert and its
store record, and the eviction of the oldest key (a full window evicts one per publish,
recorded in the same batch). Printed per run: confirmed msg/s and the broker's CPU per
message. Per round, the window's rate over the mean of the two plain arms on either side
of it (a drift of the machine's speed over the round cancels); then the median of those
ratios (the target: at least 0.90), and the median ``plain2``/``plain``: what two
identical arms differ by on this machine, the ratio's noise floor (on a shared 2-vCPU VM,
single rounds of identical arms differed by up to 25%: run many rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import pamqp.commands as cmd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import run  # noqa: E402  (bench/ on the path first, as the other tools)
from loadgen_client import Conn, connect, open_channel  # noqa: E402
from loadgen_peers import ConfirmPublisher, encode_publish  # noqa: E402
from loadgen_proc import process_tree, tree_cpu_seconds  # noqa: E402

QUEUE = "dedupe-bench"
PLAIN, DEDUPE, PLAIN2 = "dedupe-bench.plain", "dedupe-bench.window", "dedupe-bench.plain2"
KEY_WIDTH = 12
PLACEHOLDER = b"K" * KEY_WIDTH


def messages(exchange: str, first: int, count: int, body: bytes) -> list[bytes]:
    """``count`` pre-encoded persistent publishes with keys first..first+count-1 (one
    encoded template, its fixed-width key placeholder replaced: no encode per message)."""
    props = cmd.Basic.Properties(delivery_mode=2,
                                 headers={"x-deduplication-header": PLACEHOLDER.decode()})
    template = encode_publish(exchange, "", body, properties=props)
    return [template.replace(PLACEHOLDER, b"%012d" % i) for i in range(first, first + count)]


class SequencePublisher(ConfirmPublisher):
    """loadgen's pipelined confirm publisher, sending each of its messages once in order
    (the base class repeats one pre-encoded batch: one key per slot, not one per message)."""

    @property
    def payload(self) -> bytes:
        return self._frames(self.batch)

    @payload.setter
    def payload(self, _value: bytes) -> None:
        pass  # the base class's one batch: not used

    def _frames(self, n: int) -> bytes:
        at = getattr(self, "published", 0) - getattr(self, "first", 0)
        return b"".join(self.cycle[at:at + n])


async def publish(conn: Conn, msgs: list[bytes], window: int) -> tuple[float, int]:
    """Publish every message once under confirms; (seconds, nacks)."""
    pub = SequencePublisher(conn, msgs, batch=min(100, window), window=window,
                            limit=len(msgs), stall_timeout=300)
    # Delivery tags go on across runs on the channel: this run's first is one past them.
    tags = getattr(conn, "confirm_tags", 0)
    pub.low = pub.published = pub.settled = pub.first = tags
    pub.limit = tags + len(msgs)
    conn.confirm_tags = tags + len(msgs)  # type: ignore[attr-defined]
    start = time.perf_counter()
    await pub.run()
    await pub.wait_all()
    if pub.error:
        raise RuntimeError(pub.error)
    return time.perf_counter() - start, pub.nacked


async def declare(conn: Conn, window: int) -> None:
    conn.send(cmd.Queue.Declare(queue=QUEUE, durable=True), 1)
    await conn.expect(cmd.Queue.DeclareOk)
    for name, type_, args in ((PLAIN, "fanout", {}), (PLAIN2, "fanout", {}),
                              (DEDUPE, "x-message-deduplication", {"x-cache-size": window})):
        conn.send(cmd.Exchange.Declare(exchange=name, exchange_type=type_, durable=True,
                                       arguments=args), 1)
        await conn.expect(cmd.Exchange.DeclareOk)
        conn.send(cmd.Queue.Bind(queue=QUEUE, exchange=name), 1)
        await conn.expect(cmd.Queue.BindOk)


async def purge(conn: Conn) -> int:
    """Empty the queue; returns how many messages it held."""
    conn.send(cmd.Queue.Purge(queue=QUEUE), 2)
    ok = await conn.expect(cmd.Queue.PurgeOk, timeout=600)
    return int(ok.message_count)


async def bench(port: int, pid: int,
                args: argparse.Namespace) -> tuple[list[float], list[float]]:
    conn = await connect("127.0.0.1", port, "guest", "guest", "/", "dedupe-bench")
    await open_channel(conn, 1)
    await open_channel(conn, 2)
    await declare(conn, args.window)
    conn.send(cmd.Confirm.Select(), 1)
    await conn.expect(cmd.Confirm.SelectOk)
    body = b"x" * args.size
    next_key = 0
    print(f"## filling the window with {args.window:,} keys", flush=True)
    start = time.perf_counter()
    for first in range(0, args.window, 200_000):
        n = min(200_000, args.window - first)
        await publish(conn, messages(DEDUPE, first, n, body), args.window_confirms)
        await purge(conn)
    next_key = args.window
    print(f"   filled in {time.perf_counter() - start:.1f} s", flush=True)
    ratios, controls = [], []
    for r in range(args.rounds):
        rates = {}
        for exchange in (PLAIN, DEDUPE, PLAIN2):
            msgs = messages(exchange, next_key, args.messages, body)
            next_key += args.messages
            cpu0 = tree_cpu_seconds(process_tree(pid))
            seconds, nacks = await publish(conn, msgs, args.window_confirms)
            cpu = tree_cpu_seconds(process_tree(pid)) - cpu0
            enqueued = await purge(conn)
            if enqueued != args.messages:
                raise RuntimeError(f"{enqueued} of {args.messages} publishes were enqueued")
            rates[exchange] = args.messages / seconds
            print(f"  round {r + 1} {exchange.rsplit('.', 1)[1]:6}: "
                  f"{rates[exchange]:,.0f} msg/s confirmed, {1e6 * cpu / args.messages:.1f} "
                  f"us broker CPU/msg, {nacks} nacks", flush=True)
        ratios.append(rates[DEDUPE] / ((rates[PLAIN] + rates[PLAIN2]) / 2))
        controls.append(rates[PLAIN2] / rates[PLAIN])
        print(f"  round {r + 1}: dedupe/plain {ratios[-1]:.3f}, plain2/plain {controls[-1]:.3f}",
              flush=True)
    await conn.close()
    return ratios, controls


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--window", type=int, default=1_000_000, help="keys in the window")
    p.add_argument("--messages", type=int, default=100_000, help="publishes per run")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--size", type=int, default=100, help="body bytes")
    p.add_argument("--window-confirms", type=int, default=1000,
                   help="unconfirmed publishes in flight at most")
    p.add_argument("--start-timeout", type=float, default=60.0)
    args = p.parse_args(argv)
    lev = run.LeveretProcess(run.DEFAULT_LEVERET_CMD, args.start_timeout)
    try:
        pid = lev.start()
        ratios, controls = asyncio.run(bench(lev.port, pid, args))
    finally:
        lev.stop()
    print(f"  median dedupe/plain {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}) with a {args.window:,}-key window",
          flush=True)
    print(f"  median plain2/plain {statistics.median(controls):.3f} "
          f"(min {min(controls):.3f}, max {max(controls):.3f}): the noise floor", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
