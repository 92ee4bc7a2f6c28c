"""basic.get in the broker model: one message from a queue, counted, traced, held for its ack.

Theory of operation
-------------------
AMQP's basic.get (``amqp/handlers/basic.py``) and the management API's
``POST /api/queues/{vhost}/{q}/get`` (``management_ui/basic.py``, which RabbitMQ's plugin
runs as basic.get on a channel) take a message the same way: the queue's head, counted
as a get (``get_empty`` when there is none, ``redeliver`` when it was delivered before),
traced as a delivery, and either settled at once (``no_ack``) or left unacked with its
delivery recorded for a durable queue (its ``redelivered`` flag after a restart). What
follows is the front door's: AMQP writes basic.get-ok and keeps the delivery for an ack;
HTTP settles every message as its ``ackmode`` says. The queue's lookup and the read
permission stay with each front door, whose error replies differ.

The console's peek (``queues/browse.py``) is not a get: it takes nothing and counts nothing.
"""

from __future__ import annotations

from typing import NamedTuple

from leveret.model.object_stats import QueueCounters
from leveret.queues.entry import QueueEntry
from leveret.queues.queue import Queue
from leveret.queues.tracing import Tracer

__all__ = ["Got", "basic_get"]


class Got(NamedTuple):
    """A message taken by basic.get: its entry, whether it was delivered before, and the
    ready messages left behind it (basic.get-ok's ``message_count``)."""

    entry: QueueEntry
    redelivered: bool
    message_count: int


def basic_get(queue: Queue, no_ack: bool, counters: QueueCounters, tracer: Tracer | None,
              user: str, channel: int | None) -> Got | None:
    """Take the head of ``queue`` for the getter (``channel`` None: over HTTP); None if empty.

    ``counters`` are the getter's for this queue; ``tracer`` the vhost's, while traced."""
    entry = queue.take()
    if entry is None:
        counters.get_empty += 1
        return None
    message = entry.message
    redelivered = entry.delivery_count > 0
    got = Got(entry, redelivered, queue.message_count)
    if tracer is not None:
        tracer.delivered(queue.name, message, "", redelivered, channel, user, not no_ack)
    if redelivered:
        counters.redeliver += 1
    entry.delivery_count += 1
    if no_ack:
        counters.get_no_ack += 1
        queue.settle(entry)
    else:
        counters.get += 1
        if entry.stored:
            queue.note_delivered(entry)
    return got
