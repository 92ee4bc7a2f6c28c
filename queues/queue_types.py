"""Queue types (``x-queue-type``): what each accepts at declare time.

Leveret has one queue implementation. ``classic`` is it; ``quorum`` is
emulated on this single node: the same queue, with RabbitMQ's declare-time
restrictions for quorum queues (``rabbit_quorum_queue:declare`` in 3.10:
durable only, no exclusive, no auto-delete, no server-named queues, and no
``x-max-priority``/``x-queue-mode``/``x-queue-version``/
``x-queue-master-locator``) so that code written for quorum queues behaves
the same; replication and Raft are not emulated. Per-type feature semantics
(delivery limit, overflow resolution) read ``QueueSettings.queue_type``.

``stream`` is its own queue (``stream.py``), with its own declare-time
contract (``stream_arguments.py``). Texts were checked against RabbitMQ 3.10.
"""

from __future__ import annotations

from typing import Any

from leveret.model.errors import PRECONDITION_FAILED, ChannelError
from leveret.model.field_table import type_name
from leveret.queues import stream_arguments

CLASSIC = "classic"
QUORUM = "quorum"
STREAM = "stream"
SUPPORTED = (CLASSIC, QUORUM, STREAM)

# Arguments a quorum queue refuses (RabbitMQ 3.10's quorum queue capabilities).
QUORUM_UNSUPPORTED_ARGS = ("x-max-priority", "x-queue-mode", "x-queue-version",
                           "x-queue-master-locator")


def queue_type(arguments: dict[str, Any]) -> str:
    """The declared type; no ``x-queue-type`` means classic (also for equivalence)."""
    value = arguments.get("x-queue-type")
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) else CLASSIC


def check_type_argument(value: Any) -> str | None:
    """``arguments.py`` check: RabbitMQ's error term for a bad ``x-queue-type``."""
    if not isinstance(value, str):
        return f"{{unacceptable_type,{type_name(value)}}}"
    if value not in SUPPORTED:
        return f"\"unsupported queue type '{value}'\""
    return None


def check_declare(type_: str, *, server_named: bool, durable: bool, exclusive: bool,
                  auto_delete: bool, arguments: dict[str, Any], what: str) -> None:
    """Type-specific refusals when a queue of ``type_`` is declared (406, RabbitMQ's texts)."""
    if type_ == STREAM:
        stream_arguments.check_declare(server_named=server_named, durable=durable,
                                       exclusive=exclusive, auto_delete=auto_delete,
                                       arguments=arguments, what=what)
        return
    if type_ != QUORUM:
        return
    if server_named:
        raise ChannelError(PRECONDITION_FAILED,
                           "Cannot declare a server-named queue for type rabbit_quorum_queue")
    for name in QUORUM_UNSUPPORTED_ARGS:
        if name in arguments:
            raise ChannelError(PRECONDITION_FAILED,
                               f"invalid arg '{name}' for {what} of queue type rabbit_quorum_queue")
    for refused, prop in ((auto_delete, "auto-delete"), (exclusive, "exclusive-owner"),
                          (not durable, "non-durable")):
        if refused:
            raise ChannelError(PRECONDITION_FAILED, f"invalid property '{prop}' for {what}")
