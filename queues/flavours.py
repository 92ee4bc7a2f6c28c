"""Which queue class a declare makes: chosen once, from ``x-queue-type``.

Classic and (emulated) quorum queues are ``Queue``; a stream is ``Stream``
(``stream.py``). Declare and recovery both build queues here, so a queue comes
back from disk as the flavour it was declared.
"""

from __future__ import annotations

from typing import Any

from leveret.queues.host import QueueHost
from leveret.queues.queue import Queue
from leveret.queues.queue_types import STREAM, queue_type
from leveret.queues.stream import Stream


def new_queue(vhost: QueueHost | None, name: str, *, durable: bool,
              exclusive_owner: object | None = None, auto_delete: bool = False,
              arguments: dict[str, Any] | None = None) -> Queue:
    """A queue of the type its arguments declare."""
    cls = Stream if queue_type(arguments or {}) == STREAM else Queue
    return cls(vhost, name, durable=durable, exclusive_owner=exclusive_owner,
               auto_delete=auto_delete, arguments=arguments)
