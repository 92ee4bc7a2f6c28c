"""Queue length limits: ``x-max-length``, ``x-max-length-bytes`` and ``x-overflow``.

Theory of operation
-------------------
Limits count *ready* messages only (unacked ones do not count), and bytes are
body bytes, as in RabbitMQ. What happens at the limit depends on the overflow
behaviour (RabbitMQ's rabbit_amqqueue_process ``will_overflow`` /
``maybe_drop_head``):

* ``drop-head`` (default): the new message is enqueued (and delivered if a
  consumer can take it); then, while the queue is over a limit, the oldest
  ready message is dropped and dead-lettered with reason ``maxlen``. A lower
  limit set by a policy trims the queue at once.
* ``reject-publish``: if accepting the message would put the queue over a
  limit (``ready + 1 > max-length`` or ``ready bytes + size > max-length-bytes``)
  it is refused: the publisher gets ``basic.nack`` under confirms (the message
  still reaches the other queues it was routed to); without confirms it is
  dropped silently. The check is made whether or not a consumer is waiting.
* ``reject-publish-dlx``: the same, and the refused message is dead-lettered
  (reason ``maxlen``).

These are pure decisions on counts; the queue applies them.
"""

from __future__ import annotations

from leveret.queues.settings import DROP_HEAD, QueueSettings


def has_limit(settings: QueueSettings) -> bool:
    return settings.max_length is not None or settings.max_length_bytes is not None


def over_limit(settings: QueueSettings, count: int, size: int) -> bool:
    """Is a queue with ``count`` ready messages of ``size`` body bytes over a limit?"""
    max_length, max_bytes = settings.max_length, settings.max_length_bytes
    return ((max_length is not None and count > max_length)
            or (max_bytes is not None and size > max_bytes))


def refuses(settings: QueueSettings, count: int, size: int, message_size: int) -> bool:
    """``reject-publish(-dlx)``: would one more message of ``message_size`` overflow?"""
    if settings.overflow == DROP_HEAD:
        return False
    return over_limit(settings, count + 1, size + message_size)


def drops_head(settings: QueueSettings, count: int, size: int) -> bool:
    """``drop-head``: must the oldest ready message go?"""
    return settings.overflow == DROP_HEAD and over_limit(settings, count, size)
