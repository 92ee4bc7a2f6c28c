"""Redeclaration equivalence: which arguments RabbitMQ compares, in what order, and its texts.

A declare of an existing queue or exchange must match it (``durable``,
``auto_delete``, ... and these arguments), or the channel gets 406
PRECONDITION_FAILED "inequivalent arg". The same checks serve AMQP declares and
the HTTP API's PUT.

RabbitMQ 3.10 (``rabbit_amqqueue:assert_args_equivalence``) compares the arguments its
queue type declares, in that list's order, so the first difference named depends on the
*existing* queue's type: a classic queue names ``x-expires`` before ``x-message-ttl``
before ``x-max-length``, a quorum queue ``x-dead-letter-exchange`` first and
``x-message-ttl`` near the end. Two values are equivalent (``rabbit_misc:
assert_args_equivalence``) when they are the same type class (every integer width is
one, ``f`` and ``d`` are one) and compare equal, or when the decoded terms are identical
whatever their types (a string and a byte array with the same bytes, a timestamp and a
long of the same seconds). The texts print a value as the decoder holds it: a binary as
its text, anything else as Erlang's ``~p`` (``'10.0'``, ``'true'``, ``'[{long,1}]'``),
void as ``none``. The new arguments are not validated when the queue exists (a string
``x-max-length`` is "inequivalent", not "invalid").
"""

from __future__ import annotations

from typing import Any

from leveret.model.erlang_terms import field_term, field_type, pretty, write
from leveret.model.errors import PRECONDITION_FAILED, ChannelError

# rabbit_classic_queue's queue arguments, in RabbitMQ 3.10.8's order (checked one by one).
CLASSIC_EQUIVALENCE_ARGS: tuple[str, ...] = (
    "x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
    "x-max-length", "x-max-length-bytes", "x-max-priority", "x-overflow", "x-queue-mode",
    "x-queue-version", "x-single-active-consumer", "x-queue-type", "x-queue-master-locator",
)
# rabbit_quorum_queue's.
QUORUM_EQUIVALENCE_ARGS: tuple[str, ...] = (
    "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-dead-letter-strategy",
    "x-expires", "x-max-length", "x-max-length-bytes", "x-max-in-memory-length",
    "x-max-in-memory-bytes", "x-overflow", "x-single-active-consumer", "x-queue-type",
    "x-quorum-initial-group-size", "x-delivery-limit", "x-message-ttl", "x-queue-leader-locator",
)
# rabbit_stream_queue's (capabilities().queue_arguments; the filter size is 3.13's).
STREAM_EQUIVALENCE_ARGS: tuple[str, ...] = (
    "x-max-length-bytes", "x-queue-type", "x-max-age", "x-stream-max-segment-size-bytes",
    "x-initial-cluster-size", "x-queue-leader-locator", "x-stream-filter-size-bytes",
)

_INTEGER_TYPES = frozenset(("byte", "unsignedbyte", "short", "unsignedshort", "signedint",
                            "unsignedint", "long"))


def queue_equivalence_args(queue_type: str) -> tuple[str, ...]:
    """The arguments compared for an existing queue of ``queue_type``, in order."""
    if queue_type == "stream":
        return STREAM_EQUIVALENCE_ARGS
    return QUORUM_EQUIVALENCE_ARGS if queue_type == "quorum" else CLASSIC_EQUIVALENCE_ARGS


def check_arguments_equivalent(
    names: tuple[str, ...], received: dict[str, Any], current: dict[str, Any], what: str
) -> None:
    for name in names:
        if name not in received and name not in current:
            continue
        if name in received and name in current:
            new, old = received[name], current[name]
            if _equivalent(new, old):
                continue
            raise ChannelError(
                PRECONDITION_FAILED,
                f"inequivalent arg '{name}' for {what}: "
                f"received {_shown(new)} but current is {_shown(old)}")
        got = _typed(received[name]) if name in received else "none"
        now = _typed(current[name]) if name in current else "none"
        raise ChannelError(PRECONDITION_FAILED,
                           f"inequivalent arg '{name}' for {what}: received {got} but current is {now}")


def _type_class(value: object) -> str:
    name = field_type(value)
    if name in _INTEGER_TYPES:
        return "int"
    return "float" if name == "double" else name


def _equivalent(new: object, old: object) -> bool:
    new_term, old_term = field_term(new), field_term(old)
    if _type_class(new) == _type_class(old) and new_term == old_term:
        return True
    return write(new_term) == write(old_term)  # the same term, whatever the types


def _shown(value: object) -> str:
    """How rabbit_misc prints one side of a difference: quoted, or none for void."""
    term = field_term(value)
    if isinstance(term, bytes):
        return f"'{term.decode('utf-8', 'replace')}'"
    if value is None:
        return "none"
    return f"'{pretty(term, 1)}'"


def _typed(value: object) -> str:
    """One side that the other lacks: its value and its type."""
    term = field_term(value)
    if isinstance(term, bytes):
        shown = term.decode("utf-8", "replace")
    else:
        shown = pretty(term, len("the value '"))
    return f"the value '{shown}' of type '{field_type(value)}'"
