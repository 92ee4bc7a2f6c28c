"""Staging for the streams lab: the same ten messages in a queue and in a stream, a reader
killed mid-way and resumed from its own offset, and two readers at different offsets. The
broker is never crashed here, so every part runs with --url too (RabbitMQ 3.9+ has streams)."""

from __future__ import annotations

import pika

from leveret.labs.harness import Program, Run, connect, consume, depth

EXAMPLE = "leveret.labs.streams.example"
BATCH = 10
KILL_AFTER = 4  # messages the first reader finishes before it is killed
LATE_START = 7  # the offset the late reader starts at


def _fill(lab: Run, name: str, arguments: dict[str, str] | None = None) -> str:
    queue = lab.queue(name)
    with connect(lab.url) as conn:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True, arguments=arguments)
        ch.confirm_delivery()
        for n in range(1, BATCH + 1):
            ch.basic_publish("", queue, str(n).encode(), pika.BasicProperties(delivery_mode=2))
    lab.event("publish", f"{BATCH} messages to {queue}, all confirmed")
    return queue


def _read(lab: Run, stream: str, offset: str, count: int, work: float,
          who: str) -> list[tuple[str, int]]:
    """Run the example from ``offset`` until it has processed ``count``; then kill it."""
    reader = Program(lab.url, EXAMPLE, stream, "--offset", offset, "--work", str(work))
    reader.wait_for("consuming")
    got = []
    for _ in range(count):
        _, body, at = reader.wait_for("processed").split()
        got.append((body, int(at.removeprefix("offset="))))
    reader.kill()
    lab.event("deliver", f"{who} (x-stream-offset {offset}): "
              + ", ".join(f"{b}@{o}" for b, o in got))
    return got


def run(lab: Run) -> None:
    work = 0.05 if lab.fast else 0.3

    def a_queue_forgets() -> None:
        queue = _fill(lab, "queue")
        done = consume(lab.url, queue, BATCH)
        lab.event("ack", f"a consumer processed and acked all {len(done)}")
        left = depth(lab.url, queue) or 0
        lab.event("note", f"{left} message(s) left in the queue: a second reader, or the first "
                  "one after a bug fix, has nothing to read again")
        lab.row("queue, read and acked", sent=BATCH, confirmed=BATCH, processed=len(done),
                survived=left, lost=0, duplicated=0)
        lab.check(len(done) == BATCH and left == 0,
                  "a queue forgets: once acked, the messages are gone for every reader")

    def a_stream_remembers() -> None:
        stream = _fill(lab, "stream", {"x-queue-type": "stream"})
        first = _read(lab, stream, "first", KILL_AFTER, work, "reader 1")
        lab.event("crash", f"reader 1 killed (SIGKILL) after {len(first)}, last offset "
                  f"{first[-1][1]}")
        resume = first[-1][1] + 1
        rest = _read(lab, stream, str(resume), BATCH - KILL_AFTER, work,
                     "reader 1 restarted")
        bodies = [b for b, _ in first + rest]
        lab.row("stream, reader killed and resumed", sent=BATCH, confirmed=BATCH,
                processed=len(set(bodies)), survived=None, lost=BATCH - len(set(bodies)),
                duplicated=len(bodies) - len(set(bodies)))
        lab.check(sorted(bodies, key=int) == [str(n) for n in range(1, BATCH + 1)],
                  "a stream remembers: resumed at its own next offset, the reader gets the "
                  "rest, none twice")

        everything = _read(lab, stream, "first", BATCH, 0.0, "reader 2")
        late = _read(lab, stream, str(LATE_START), BATCH - LATE_START, 0.0, "reader 3")
        lab.row("stream, two more readers", sent=0, confirmed=0,
                processed=len(everything) + len(late), survived=len(everything), lost=0,
                duplicated=0)
        lab.check([o for _, o in everything] == list(range(BATCH)),
                  "a second reader from 'first' reads all ten, offsets 0 to 9: acks removed "
                  "nothing")
        lab.check([o for _, o in late] == list(range(LATE_START, BATCH)),
                  f"a third reader from offset {LATE_START} reads only what follows it")

    lab.part("A. a queue forgets", a_queue_forgets)
    lab.part("B. a stream remembers: replay after a crash, readers at different offsets",
             a_stream_remembers)
