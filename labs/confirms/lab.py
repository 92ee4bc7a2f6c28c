"""Staging for the confirms lab: a crash mid-stream without and with confirms; the cost."""

from __future__ import annotations

import time

import pika

from leveret.labs.confirms import example
from leveret.labs.harness import Run, connect, drain, settle

WINDOW = 100


def run(lab: Run) -> None:
    n = 500 if lab.fast else 5_000

    def without_confirms() -> None:
        queue = lab.queue("no-confirms")
        before, after = range(0, n // 2), range(n // 2, n // 2 + min(n // 2, 200))
        conn = connect(lab.url)
        ch = conn.channel()
        ch.queue_declare(queue, durable=True)
        settle(lab.url)  # the queue itself must survive (see harness.settle)
        example.publish_without_confirms(ch, queue, before)
        lab.event("publish", f"{len(before)} persistent messages, no confirms")
        lab.broker.freeze()
        lab.event("crash", "broker frozen (SIGSTOP): from here on nothing it receives is kept")
        example.publish_without_confirms(ch, queue, after)
        sent = len(before) + len(after)
        lab.event("publish", f"{len(after)} more: basic_publish returned without an error")
        lab.broker.kill()
        lab.event("crash", "SIGKILL")
        try:
            conn.close()
        except pika.exceptions.AMQPError:
            pass  # the publisher only learns now that its connection is gone
        lab.broker.restart()
        lab.event("restart", "same data dir")
        survived = len(drain(lab.url, queue))
        lab.event("deliver", f"{survived} of {sent} sent messages in the queue")
        lab.row("no confirms, crash mid-stream", sent=sent, confirmed=None, survived=survived,
                lost=sent - survived, duplicated=0)
        lab.check(sent - survived >= len(after),
                  f"without confirms {sent - survived} of {sent} were lost, and the publisher "
                  "was never told")

    def with_confirms() -> None:
        queue = lab.queue("confirms")
        with connect(lab.url) as conn:
            conn.channel().queue_declare(queue, durable=True)
        crash_at = n // 2

        def on_confirm(count: int) -> None:
            if count >= crash_at and lab.broker.proc is not None:  # type: ignore[union-attr]
                lab.event("confirm", f"{count} confirmed so far (window {WINDOW})")
                lab.broker.kill()
                lab.event("crash", "SIGKILL, mid-stream")

        confirmed, sent = example.publish_with_window(lab.url, queue, range(n), WINDOW,
                                                      on_confirm)
        lab.event("publish", f"the publisher stopped: its connection is gone ({len(confirmed)} "
                  "confirmed)")
        lab.broker.restart()
        lab.event("restart", "same data dir")
        survived = {int(body) for _, _, body in drain(lab.url, queue)}
        lost = confirmed - survived
        extra = survived - confirmed
        lab.event("deliver", f"{len(survived)} in the queue: every confirmed one, plus "
                  f"{len(extra)} that were sent but not yet confirmed at the crash")
        lab.row("window of confirms, crash mid-stream", sent=sent, confirmed=len(confirmed),
                survived=len(survived), lost=len(lost), duplicated=0)
        lab.check(not lost and len(confirmed) >= crash_at,
                  f"all {len(confirmed)} confirmed messages survived the SIGKILL")

    def cost() -> None:
        m = 300 if lab.fast else 3_000
        queue = lab.queue("cost")
        with connect(lab.url) as conn:
            conn.channel().queue_declare(queue, durable=True)
            start = time.perf_counter()
            example.publish_one_at_a_time(conn.channel(), queue, range(m))
            each = time.perf_counter() - start
        lab.event("confirm", f"{m} one at a time: {each:.2f} s, {each / m * 1e6:,.0f} us per "
                  f"message, {m / each:,.0f} msg/s")
        start = time.perf_counter()
        confirmed, _ = example.publish_with_window(lab.url, queue, range(m), WINDOW)
        windowed = time.perf_counter() - start
        lab.event("confirm", f"{m} with a window of {WINDOW}: {windowed:.2f} s, "
                  f"{windowed / m * 1e6:,.0f} us per message, {m / windowed:,.0f} msg/s")
        lab.row("one at a time (timed)", sent=m, confirmed=m, survived=None, lost=None,
                duplicated=None)
        lab.row(f"window of {WINDOW} (timed)", sent=m, confirmed=len(confirmed),
                survived=None, lost=None, duplicated=None)
        lab.check(len(confirmed) == m and windowed < each,
                  f"a window of {WINDOW} is {each / windowed:.1f}x faster than waiting for "
                  "each confirm")

    lab.part("A. no confirms: freeze the broker mid-stream, publish on, SIGKILL", without_confirms,
             own_broker=True)
    lab.part("B. a window of confirms: SIGKILL after half are confirmed", with_confirms,
             own_broker=True)
    lab.part("C. the cost: waiting for each confirm vs a window", cost)
