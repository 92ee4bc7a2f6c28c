"""Staging for the durability lab: publish to the 4 combinations, SIGKILL, restart, count."""

from __future__ import annotations

from leveret.labs.durability import example
from leveret.labs.harness import Run, connect, settle

# Only this combination survives a crash; the lesson asks the student to predict it.
SURVIVES = {(True, True)}


def run(lab: Run) -> None:
    cases = [(lab.queue(name.removeprefix("lab.")), durable, persistent)
             for name, durable, persistent in example.CASES]

    def publish() -> None:
        with connect(lab.url) as conn:
            example.publish(conn.channel(), cases)
        for queue, durable, persistent in cases:
            lab.event("publish", f"1 {'persistent' if persistent else 'transient'} message to "
                      f"{'durable' if durable else 'non-durable'} queue {queue}")
        lab.event("confirm", "all 4 confirmed: the broker has every message before the crash")
        with connect(lab.url) as conn:
            held = [example.count(conn, q) for q, _, _ in cases]
        lab.check(held == [1, 1, 1, 1], f"before the crash each queue holds 1 message {held}")

    def crash() -> None:
        pid = lab.broker.pid  # type: ignore[union-attr]
        settle(lab.url)  # every durable queue's definition on disk too (see harness.settle)
        lab.broker.kill()
        lab.event("crash", f"SIGKILL broker pid {pid}: no shutdown, nothing flushed")
        lab.broker.restart()
        lab.event("restart", f"same data dir, broker pid {lab.broker.pid} "  # type: ignore[union-attr]
                  f"on port {lab.broker.port}")  # type: ignore[union-attr]
        with connect(lab.url) as conn:
            for queue, durable, persistent in cases:
                left = example.count(conn, queue)
                label = (f"{'durable' if durable else 'non-durable'} queue, "
                         f"{'persistent' if persistent else 'transient'} msg")
                what = "queue is gone" if left is None else f"{left} message(s)"
                lab.event("deliver" if left else "lost", f"{queue}: {what}")
                survived = left or 0
                lab.row(label, sent=1, confirmed=1, survived=survived, lost=1 - survived,
                        duplicated=0)
                expected = 1 if (durable, persistent) in SURVIVES else 0
                lab.check(survived == expected, f"{label}: {'survives' if expected else 'is lost'}")
                lab.check((left is not None) == durable,
                          f"{label}: the queue {'comes back' if durable else 'itself is gone'}")

    lab.part("publish one message to each combination (with confirms)", publish)
    lab.part("SIGKILL the broker, restart it on the same data dir, count", crash,
             own_broker=True)
