"""Staging for the transactions lab: what tx.commit guarantees (rollback, crash before and
after a commit) and what it costs next to publisher confirms."""

from __future__ import annotations

import time
from collections.abc import Callable

import pika

from leveret.labs.confirms.example import publish_one_at_a_time, publish_with_window
from leveret.labs.harness import Run, connect, depth, drain, settle
from leveret.labs.transactions import example

PERSISTENT = pika.BasicProperties(delivery_mode=2)
BATCH = 100


def run(lab: Run) -> None:
    def rollback() -> None:
        queue = lab.queue("rollback")
        with connect(lab.url) as conn:
            conn.channel().queue_declare(queue, durable=True)
            example.publish_then_roll_back(conn.channel(), queue, range(10))
        lab.event("publish", "10 messages in a transaction, then tx.rollback")
        left = depth(lab.url, queue) or 0
        lab.event("note", f"{left} in the queue")
        lab.row("10 published, rolled back", sent=10, confirmed=0, survived=left, lost=None,
                duplicated=0)
        lab.check(left == 0, "rollback: nothing of the transaction was enqueued")

    def crash_around_commit() -> None:
        before, after = lab.queue("uncommitted"), lab.queue("committed")
        with connect(lab.url) as conn:
            ch = conn.channel()
            ch.queue_declare(before, durable=True)
            ch.queue_declare(after, durable=True)
        settle(lab.url)  # the queues themselves must survive (see harness.settle)
        uncommitted = connect(lab.url)
        tx = uncommitted.channel()
        tx.tx_select()
        for n in range(BATCH):
            tx.basic_publish("", before, str(n).encode(), PERSISTENT)
        tx.queue_declare(before, passive=True)  # a round trip: the broker has read them all
        lab.event("publish", f"{BATCH} to {before} in an open transaction (no commit)")
        with connect(lab.url) as conn:
            example.publish_in_transactions(conn.channel(), after, range(BATCH), BATCH)
        lab.event("publish", f"{BATCH} to {after}, then tx.commit returned (commit-ok)")
        lab.broker.kill()
        lab.event("crash", "SIGKILL")
        try:
            uncommitted.close()
        except pika.exceptions.AMQPError:
            pass
        lab.broker.restart()
        lab.event("restart", "same data dir")
        lost_tx = len(drain(lab.url, before))
        kept = len(drain(lab.url, after))
        lab.event("deliver", f"uncommitted: {lost_tx} survived; committed: {kept} survived")
        lab.row("open transaction, crash", sent=BATCH, confirmed=0, survived=lost_tx,
                lost=BATCH - lost_tx, duplicated=0)
        lab.row("committed transaction, crash", sent=BATCH, confirmed=BATCH, survived=kept,
                lost=BATCH - kept, duplicated=0)
        lab.check(lost_tx == 0, "a transaction not committed before the crash: none survive")
        lab.check(kept == BATCH, "a committed transaction: all of it survives")

    def cost() -> None:
        n = 200 if lab.fast else 2_000
        queue = lab.queue("cost")
        with connect(lab.url) as conn:
            conn.channel().queue_declare(queue, durable=True)
        timings: dict[str, float] = {}

        def timed(label: str, publish: Callable[[], None]) -> None:
            start = time.perf_counter()
            publish()
            took = timings[label] = time.perf_counter() - start
            lab.event("confirm" if "confirm" in label else "ack",
                      f"{label:<28} {n / took:8,.0f} msg/s  {took / n * 1e6:7,.0f} us/msg")
            lab.row(f"{label} (timed)", sent=n, confirmed=n, survived=None, lost=None,
                    duplicated=None)

        with connect(lab.url) as conn:
            timed("tx.commit every message",
                  lambda: example.publish_in_transactions(conn.channel(), queue, range(n), 1))
            timed(f"tx.commit every {BATCH}",
                  lambda: example.publish_in_transactions(conn.channel(), queue, range(n),
                                                          BATCH))
            timed("confirm, one at a time",
                  lambda: publish_one_at_a_time(conn.channel(), queue, range(n)))
        timed(f"confirms, window of {BATCH}",
              lambda: publish_with_window(lab.url, queue, range(n), BATCH) and None)
        lab.check(timings[f"tx.commit every {BATCH}"] < timings["tx.commit every message"],
                  "a commit per message is the slow way (one sync each)")
        lab.check(timings[f"confirms, window of {BATCH}"] < timings["confirm, one at a time"],
                  "confirms pay off only with a window")

    lab.part("A. tx.rollback", rollback)
    lab.part("B. SIGKILL before and after tx.commit", crash_around_commit, own_broker=True)
    lab.part("C. the cost, side by side", cost)
