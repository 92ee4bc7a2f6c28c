"""Staging for the acks lab: consumers (separate processes) killed mid-batch, and one
that never acks. The broker is never crashed here, so every part runs with --url too."""

from __future__ import annotations

import pika

from leveret.labs.harness import Program, Run, connect, consume, depth, wait_until

EXAMPLE = "leveret.labs.acks.example"
BATCH = 10
KILL_AFTER = 3  # messages the consumer finishes before it is killed


def _fill(lab: Run, name: str) -> str:
    queue = lab.queue(name)
    with connect(lab.url) as conn:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True)
        ch.confirm_delivery()
        for n in range(1, BATCH + 1):
            ch.basic_publish("", queue, str(n).encode(), pika.BasicProperties(delivery_mode=2))
    lab.event("publish", f"{BATCH} messages to {queue}, all confirmed")
    return queue


def _killed_mid_batch(lab: Run, queue: str, mode: str, work: float) -> list[str]:
    consumer = Program(lab.url, EXAMPLE, queue, mode, "--work", str(work), "--prefetch", "5")
    consumer.wait_for("consuming")
    for _ in range(KILL_AFTER):
        line = consumer.wait_for("processed")
        lab.event("deliver", f"{mode} consumer: {line}" + (", acked" if mode == "manual-ack"
                                                               else ""))
    if mode == "auto-ack":  # wait until the broker has handed over (and forgotten) them all
        wait_until(lambda: depth(lab.url, queue) == 0, "the queue to empty", lambda: None)
    consumer.kill()
    done = [line for line in consumer.output if line.startswith("processed")]
    lab.event("crash", f"consumer process killed (SIGKILL) after {len(done)} processed")
    return done


def run(lab: Run) -> None:
    work = 0.2  # per message: the consumer is busy when the kill comes

    def auto_ack() -> None:
        queue = _fill(lab, "auto-ack")
        done = _killed_mid_batch(lab, queue, "auto-ack", work)
        left = depth(lab.url, queue) or 0
        lab.event("lost", f"{left} message(s) in the queue: the other {BATCH - len(done) - left} "
                  "were delivered to a consumer that died before processing them")
        lab.row("auto-ack, consumer killed", sent=BATCH, confirmed=BATCH, processed=len(done),
                survived=left, lost=BATCH - len(done) - left, duplicated=0)
        lab.check(left == 0 and len(done) < BATCH,
                  f"auto-ack: {BATCH - len(done)} messages lost with the consumer")

    def manual_ack() -> None:
        queue = _fill(lab, "manual-ack")
        done = _killed_mid_batch(lab, queue, "manual-ack", work)
        rest = consume(lab.url, queue, BATCH - len(done))
        got = [body.decode() for _, _, body in rest]
        again = [body.decode() for method, _, body in rest if method.redelivered]
        lab.event("redelivered", f"a new consumer gets the {len(rest)} not acked: "
                  f"{', '.join(got)}; {len(again)} of them ({', '.join(again)}) marked "
                  "redelivered: the first consumer held them, unacked, when it died")
        lab.event("ack", f"the new consumer acks all {len(rest)}")
        bodies = [line.split()[1] for line in done] + got
        dup = len(bodies) - len(set(bodies))
        lab.row("manual ack, consumer killed", sent=BATCH, confirmed=BATCH,
                processed=len(set(bodies)), survived=0, lost=BATCH - len(set(bodies)),
                duplicated=dup)
        lab.check(len(set(bodies)) == BATCH and bool(again) and dup == 0,
                  f"manual ack: nothing lost; {len(again)} unacked came back redelivered")

    def never_ack() -> None:
        queue = _fill(lab, "never-ack")
        holder = Program(lab.url, EXAMPLE, queue, "never-ack")
        holder.wait_for("consuming")
        for _ in range(BATCH):
            holder.wait_for("received")
        lab.event("deliver", f"the never-ack consumer received all {BATCH}, acked none")
        with connect(lab.url) as conn:
            ch = conn.channel()
            ready = ch.queue_declare(queue, passive=True).method.message_count
            method, _, _ = ch.basic_get(queue)
        lab.event("note", f"queue shows {ready} ready; basic.get by another client: "
                  f"{'empty' if method is None else 'got one'}: all {BATCH} are held, unacked")
        holder.kill()
        lab.event("crash", "the never-ack consumer is stopped (only its channel closing frees "
                  "them)")
        back = consume(lab.url, queue, BATCH)
        redelivered = sum(m.redelivered for m, _, _ in back)
        lab.event("redelivered", f"{redelivered} of {BATCH} come back marked redelivered")
        lab.row("never ack, then stopped", sent=BATCH, confirmed=BATCH, processed=0,
                survived=len(back), lost=BATCH - len(back), duplicated=0)
        lab.check(ready == 0 and method is None,
                  "never ack: while the consumer lives, no one else can get its messages")
        lab.check(redelivered == BATCH, "never ack: they return, redelivered, when it goes")

    lab.part("A. auto-ack consumer killed mid-batch", auto_ack)
    lab.part("B. manual-ack consumer killed mid-batch", manual_ack)
    lab.part("C. a consumer that never acks", never_ack)
