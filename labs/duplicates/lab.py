"""Staging for the duplicates lab: a consumer crashes between its work and its ack."""

from __future__ import annotations

import collections
import tempfile
from pathlib import Path

import pika

from leveret.labs.harness import Program, Run, connect

EXAMPLE = "leveret.labs.duplicates.example"
ORDERS = 5
CRASH_ON = "order-3"


def run(lab: Run) -> None:
    def crash_and_resume(style: str, idempotent: bool) -> None:
        queue = lab.queue(style)
        with tempfile.TemporaryDirectory(prefix="leveret-lab-ledger-") as tmp:
            stage(style, idempotent, queue, str(Path(tmp) / "ledger.txt"))

    def stage(style: str, idempotent: bool, queue: str, ledger: str) -> None:
        with connect(lab.url) as conn:
            ch = conn.channel()
            ch.queue_declare(queue, durable=True)
            ch.confirm_delivery()
            for n in range(1, ORDERS + 1):
                ch.basic_publish("", queue, f"charge 10 EUR for order {n}".encode(),
                                 pika.BasicProperties(delivery_mode=2, message_id=f"order-{n}"))
        lab.event("publish", f"{ORDERS} orders, message_id order-1..order-{ORDERS}, confirmed")
        flags = ["--idempotent"] if idempotent else []
        first = Program(lab.url, EXAMPLE, queue, ledger, *flags, "--crash-before-ack", CRASH_ON)
        first.wait_for("consuming")
        for _ in range(2):
            lab.event("ack", first.wait_for("processed"))
        lab.event("crash", first.wait_for("crash") + ": consumer SIGKILLs itself")
        first.proc.wait()
        second = Program(lab.url, EXAMPLE, queue, ledger, *flags)
        second.wait_for("consuming")
        lab.event("note", f"a new {style} consumer starts")
        for _ in range(ORDERS - 2):
            line = second.wait_for(("processed", "skipped"))
            kind = "redelivered" if "redelivered=True" in line else "ack"
            lab.event(kind, line)
        second.kill()
        effects = collections.Counter(line.split()[0] for line in Path(ledger).open())
        dup = sum(c - 1 for c in effects.values())
        lab.event("note", "ledger: " + ", ".join(f"{k} x{v}" for k, v in sorted(effects.items())))
        lab.row(f"{style} consumer, crash before ack", sent=ORDERS, confirmed=ORDERS,
                survived=len(effects), lost=ORDERS - len(effects), duplicated=dup)
        if idempotent:
            lab.check(dup == 0 and len(effects) == ORDERS,
                      "idempotent: order-3 was redelivered, recognised by message_id and "
                      "acked without charging twice")
        else:
            lab.check(effects[CRASH_ON] == 2 and dup == 1 and len(effects) == ORDERS,
                      "naive: nothing lost, but order-3 was charged twice")

    lab.part("A. naive consumer: crash after the work, before the ack",
             lambda: crash_and_resume("naive", False))
    lab.part("B. idempotent consumer: the same crash, message_id remembered",
             lambda: crash_and_resume("idempotent", True))
