"""Teaching labs: durability and acknowledgements you can run, break and see.

Theory of operation
-------------------
Each lab is a folder: ``lesson.md`` (the question, a prediction, what to
watch, what happened and why, links), ``example.py`` (the plain pika client a
student copies; it runs on its own) and ``lab.py`` (the staging: it drives the
example's functions, starts, freezes, kills and restarts the broker at the
right moments, and checks the outcome the lesson predicts).

``LABS`` below is the catalogue ``leveret lab list`` prints; it imports no lab
and no pika, so listing works in an install without the ``labs`` extra. The
command (``command.py``) loads a lab's module by name only when it is run.

This layer sits on top of everything: it talks to a broker only over AMQP and
through a subprocess (``python -m leveret serve``), never through the broker's
own modules, so every lab runs unchanged against RabbitMQ with ``--url``.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["LABS", "Lab", "find"]


class Lab(NamedTuple):
    name: str  # also the folder's name
    summary: str


LABS: tuple[Lab, ...] = (
    Lab("durability", "durable queue x persistent message x SIGKILL: which of the 4 survive"),
    Lab("confirms", "publisher confirms: what a crash loses without them, and what waiting costs"),
    Lab("acks", "consumer acks: auto-ack loses, unacked comes back redelivered, never-ack holds"),
    Lab("prefetch", "prefetch and fair dispatch: a slow and a fast consumer, prefetch 1 vs unlimited"),
    Lab("poison", "nack, reject, requeue: a requeue loop, x-delivery-limit, DLQ and x-death, retry"),
    Lab("duplicates", "at-least-once means duplicates: crash before the ack, idempotent consumer"),
    Lab("transactions", "tx.commit vs publisher confirms: the guarantee and the cost, side by side"),
    Lab("streams", "a queue forgets, a stream remembers: replay after a crash, readers at offsets"),
    Lab("fsync", "what 'confirmed' means on disk: group commit, confirms per fsync, latency"),
)


def find(name: str) -> Lab | None:
    return next((lab for lab in LABS if lab.name == name), None)
