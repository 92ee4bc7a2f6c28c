"""Redeclaration equivalence: which arguments RabbitMQ compares, and its error texts.

A declare of an existing queue or exchange must match it (``durable``,
``auto_delete``, ... and these arguments), or the channel gets 406
PRECONDITION_FAILED "inequivalent arg". The same checks serve AMQP declares and
the HTTP API's PUT.
"""

from __future__ import annotations

from typing import Any

from leveret.model.errors import PRECONDITION_FAILED, ChannelError
from leveret.model.field_table import type_name

# Arguments RabbitMQ compares when a queue or exchange is redeclared; others are ignored.
QUEUE_EQUIVALENCE_ARGS: tuple[str, ...] = (
    "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-expires", "x-max-length",
    "x-max-length-bytes", "x-max-priority", "x-message-ttl", "x-overflow", "x-queue-mode",
    "x-queue-type", "x-single-active-consumer", "x-delivery-limit", "x-queue-version",
    "x-queue-leader-locator", "x-max-age", "x-dead-letter-strategy",
)


def _shown(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def check_arguments_equivalent(
    names: tuple[str, ...], received: dict[str, Any], current: dict[str, Any], what: str
) -> None:
    for name in names:
        new, old = received.get(name), current.get(name)
        if _normalise(new) == _normalise(old):
            continue
        if new is not None and old is not None:
            # Both present: RabbitMQ's assert_field_equivalence shows bare values
            # ("received '1000' but current is '60000'"), with no type names.
            raise ChannelError(
                PRECONDITION_FAILED,
                f"inequivalent arg '{name}' for {what}: "
                f"received '{_shown(new)}' but current is '{_shown(old)}'")
        got = ("none" if new is None
               else f"the value '{_shown(new)}' of type '{type_name(new)}'")
        now = ("none" if old is None
               else f"the value '{_shown(old)}' of type '{type_name(old)}'")
        raise ChannelError(PRECONDITION_FAILED,
                           f"inequivalent arg '{name}' for {what}: received {got} but current is {now}")


def _normalise(value: object) -> object:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value
