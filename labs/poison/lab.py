"""Staging for the poison lab: requeue loop, x-delivery-limit, DLQ and x-death, delayed retry.

Everything happens over one connection, waiting for deliveries; the broker is never
crashed, so every part also runs on RabbitMQ (--url).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import pika

from leveret.labs.harness import Run, connect, wait_until
from leveret.labs.poison import example

LOOPS = 20  # deliveries of the same poison message we watch in the requeue loop
LIMIT = 3


def _consume(conn: pika.BlockingConnection, ch: Any, queue: str,
             on: Callable[[Any, Any, Any, bytes], None], until: Callable[[], bool],
             what: str) -> None:
    tag = ch.basic_consume(queue, on)
    wait_until(until, what, lambda: conn.process_data_events(0.2))
    ch.basic_cancel(tag)


def run(lab: Run) -> None:
    persistent = pika.BasicProperties(delivery_mode=2, message_id="poison-1")

    def requeue_loop() -> None:
        queue = lab.queue("loop")
        seen: list[bool] = []
        with connect(lab.url) as conn:
            ch = conn.channel()
            ch.queue_declare(queue, durable=True)
            ch.basic_publish("", queue, b"poison", persistent)
            lab.event("publish", "1 message the consumer cannot process")

            def on(ch: Any, method: Any, props: Any, body: bytes) -> None:
                seen.append(method.redelivered)
                if len(seen) <= LOOPS:
                    ch.basic_nack(method.delivery_tag, requeue=True)

            _consume(conn, ch, queue, on, lambda: len(seen) >= LOOPS + 1, "the loop")
            ch.queue_purge(queue)
        lab.event("redelivered", f"nack(requeue=True): the same message came back {LOOPS} "
                  "times at once; it would go on forever")
        lab.row("requeue loop (1 message)", sent=1, confirmed=None, survived=1, lost=0,
                duplicated=len(seen) - 1)
        lab.check(len(seen) > LOOPS and all(seen[1:]) and not seen[0],
                  f"requeue loop: delivered {len(seen)} times, redelivered=true from the second")

    def delivery_limit() -> None:
        queue, dlq = lab.queue("limited"), lab.queue("limited-dlq")
        deliveries: list[Any] = []
        dead: list[Any] = []
        with connect(lab.url) as conn:
            ch = conn.channel()
            ch.queue_declare(dlq, durable=True)
            ch.queue_declare(queue, durable=True, arguments={
                "x-queue-type": "quorum", "x-delivery-limit": LIMIT,
                "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
            ch.basic_publish("", queue, b"poison", persistent)
            lab.event("publish", f"1 message to a quorum queue with x-delivery-limit={LIMIT}")

            def on(ch: Any, method: Any, props: Any, body: bytes) -> None:
                deliveries.append((props.headers or {}).get("x-delivery-count"))
                ch.basic_nack(method.delivery_tag, requeue=True)

            def on_dead(ch: Any, method: Any, props: Any, body: bytes) -> None:
                dead.append(props)
                ch.basic_ack(method.delivery_tag)

            ch.basic_consume(dlq, on_dead)
            _consume(conn, ch, queue, on, lambda: bool(dead), "the message in the DLQ")
        if any(c is not None for c in deliveries):
            counts = ", ".join("absent" if c is None else str(c) for c in deliveries)
            header = f"x-delivery-count on each: {counts}"
        else:  # Leveret counts returns without telling the consumer (lesson.md, part B)
            header = "no x-delivery-count header: this broker counts without adding it"
        lab.event("redelivered", f"delivered {len(deliveries)} times ({header}), then "
                  "dead-lettered")
        reason = dead[0].headers["x-death"][0]["reason"]
        lab.event("deliver", f"in {dlq}, x-death reason {reason!r}")
        lab.row(f"x-delivery-limit {LIMIT}", sent=1, confirmed=None, survived=1, lost=0,
                duplicated=len(deliveries) - 1)
        lab.check(len(deliveries) == LIMIT + 1 and reason == "delivery_limit",
                  f"x-delivery-limit {LIMIT}: {LIMIT + 1} deliveries, then the DLQ "
                  "(reason delivery_limit)")

    def dead_letter_queue() -> None:
        queue, dlx, dlq = lab.queue("work"), lab.queue("dlx"), lab.queue("dlq")
        got: list[Any] = []
        with connect(lab.url) as conn:
            ch = conn.channel()
            ch.exchange_declare(dlx, "direct", durable=True)
            ch.queue_declare(dlq, durable=True)
            ch.queue_bind(dlq, dlx, routing_key="orders")
            ch.queue_declare(queue, durable=True, arguments={"x-dead-letter-exchange": dlx})
            ch.queue_bind(queue, "amq.direct", routing_key="orders")
            ch.basic_publish("amq.direct", "orders", b"poison", persistent)
            lab.event("publish", f"1 message via amq.direct, key 'orders', to {queue}")
            method, _, _ = ch.basic_get(queue)
            ch.basic_reject(method.delivery_tag, requeue=False)
            lab.event("nack", "basic.reject(requeue=False): dead-lettered to exchange " + dlx)
            def keep(c: Any, m: Any, p: Any, b: bytes) -> None:
                got.append(p)
                c.basic_ack(m.delivery_tag)

            _consume(conn, ch, dlq, keep, lambda: bool(got), "the dead letter")
        headers = got[0].headers
        lab.event("deliver", f"in {dlq}; its x-death header, field by field:")
        for line in example.explain_x_death(headers):
            lab.event("", line)
        for key in ("x-first-death-queue", "x-first-death-reason", "x-first-death-exchange"):
            if key in headers:
                lab.event("", f"{key} = {headers[key]}")
        death = headers["x-death"][0]
        lab.row("reject -> DLQ", sent=1, confirmed=None, survived=1, lost=0, duplicated=0)
        lab.check(death["queue"] == queue and death["reason"] == "rejected"
                  and death["count"] == 1 and death["exchange"] == "amq.direct"
                  and list(death["routing-keys"]) == ["orders"],
                  "DLQ: x-death names the queue, reason rejected, count 1, exchange and keys")

    def delayed_retry() -> None:
        work, retry, dlq = lab.queue("retry-work"), lab.queue("retry-wait"), lab.queue("parked")
        delay_ms = 300 if lab.fast else 1000
        outcomes: list[tuple[float, int, str]] = []
        with connect(lab.url) as conn:
            ch = conn.channel()
            example.declare(ch, work, retry, dlq, delay_ms)
            start = time.monotonic()
            ch.basic_publish("", work, b"poison", persistent)
            lab.event("publish", f"1 poison message; each failure waits {delay_ms} ms in "
                      f"{retry} (TTL), then dead-letters back")

            def on(ch: Any, method: Any, props: Any, body: bytes) -> None:
                tries = example.attempts(props)
                outcome = example.handle(ch, method, props, body, dlq)
                outcomes.append((time.monotonic() - start, tries, outcome))
                lab.event("deliver" if tries == 0 else "redelivered",
                          f"attempt {tries + 1}: {outcome}")

            _consume(conn, ch, work, on, lambda: len(outcomes) >= example.MAX_ATTEMPTS,
                     "the retries")
            method, props, _ = ch.basic_get(dlq, auto_ack=True)
        reasons = [(d["queue"], d["reason"], int(d["count"])) for d in props.headers["x-death"]]
        lab.event("deliver", f"parked in {dlq}; x-death: {reasons}")
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(outcomes)]
        lab.event("note", "time between attempts: " + ", ".join(f"{g * 1000:.0f} ms" for g in gaps))
        lab.row("TTL + DLX retry, then parked", sent=1, confirmed=None, survived=1, lost=0,
                duplicated=len(outcomes) - 1)
        lab.check(all(g >= delay_ms / 1000 * 0.9 for g in gaps) and method is not None
                  and outcomes[-1][2] == "parked",
                  f"retry: {example.MAX_ATTEMPTS} attempts, each at least {delay_ms} ms apart, "
                  "then parked")
        lab.check({r[:2] for r in reasons} == {(work, "rejected"), (retry, "expired")},
                  "retry: x-death has one entry per (queue, reason): rejected and expired")

    lab.part("A. nack with requeue: the loop", requeue_loop)
    lab.part(f"B. x-delivery-limit {LIMIT}", delivery_limit)
    lab.part("C. reject without requeue: the dead-letter queue and x-death", dead_letter_queue)
    lab.part("D. delayed retry with TTL + DLX", delayed_retry)
