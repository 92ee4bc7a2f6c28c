"""Validation of queue.declare arguments, as RabbitMQ's declare-time checks.

A declarative table: argument name -> check returning None or RabbitMQ's
error term (printed the way Erlang prints it, e.g. ``{value_negative,-1}``),
which becomes 406 ``invalid arg 'x-…' for queue 'q' in vhost '/': <term>``.
RabbitMQ 3.10 words type errors three ways, each reproduced here (probed
against it with every field type): integer arguments say ``"expected integer,
got longstr"``; exchange names (``x-dead-letter-exchange``, an exchange's
``alternate-exchange``) say ``invalid type 'signedint' for arg '…' in queue
'q' in vhost '/'`` (an :class:`InvalidType`); the rest say
``{unacceptable_type,bool}``. Type names are the *wire* types the client sent
(``model/field_table``). Unknown arguments are accepted and ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from leveret.model.errors import PRECONDITION_FAILED, ChannelError
from leveret.model.field_table import type_name
from leveret.queues import stream_arguments
from leveret.queues.queue_types import STREAM, check_type_argument, queue_type

MAX_EXPIRY = 315_360_000_000  # ms (ten years): the largest TTL RabbitMQ 3.10 accepts, found by probing it
MAX_PRIORITY = 255
OVERFLOW_VALUES = ("drop-head", "reject-publish", "reject-publish-dlx")
QUEUE_MODES = ("default", "lazy")

Check = Callable[[Any], str | None]


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


class InvalidType(str):
    """A type error RabbitMQ words as "invalid type '<type>' for arg '<name>' in <what>"."""

    __slots__ = ()


def _int(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f'"expected integer, got {type_name(value)}"'
    return None


def _exchange_name(value: Any) -> str | None:
    return None if _text(value) is not None else InvalidType(type_name(value))


def _non_negative(value: Any) -> str | None:
    error = _int(value)
    if error is None and value < 0:
        return f"{{value_negative,{value}}}"
    return error


def _expiry(value: Any) -> str | None:
    error = _non_negative(value)
    if error is None and value > MAX_EXPIRY:
        return f"{{value_too_large,{value}}}"
    return error


def _expires(value: Any) -> str | None:
    error = _int(value)
    if error is None and value == 0:
        return "{value_zero,0}"
    return error or _expiry(value)


def _max_priority(value: Any) -> str | None:
    error = _non_negative(value)
    if error is None and value > MAX_PRIORITY:
        return f"{{max_value_exceeded,{value}}}"
    return error


def _longstr(value: Any) -> str | None:
    return None if _text(value) is not None else f"{{unacceptable_type,{type_name(value)}}}"


def _bool(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"{{unacceptable_type,{type_name(value)}}}"


def _one_of(values: tuple[str, ...], error: str) -> Check:
    def check(value: Any) -> str | None:
        text = _text(value)
        if text is None:
            return f"{{unacceptable_type,{type_name(value)}}}"
        return None if text in values else error

    return check


def _queue_mode(value: Any) -> str | None:
    text = _text(value)
    if text is None:
        return f"{{unacceptable_type,{type_name(value)}}}"
    return None if text in QUEUE_MODES else f"\"unsupported queue mode '{text}'\""


CHECKS: dict[str, Check] = {
    "x-expires": _expires,
    "x-message-ttl": _expiry,
    "x-dead-letter-exchange": _exchange_name,
    "x-dead-letter-routing-key": _longstr,
    "x-max-length": _non_negative,
    "x-max-length-bytes": _non_negative,
    "x-max-priority": _max_priority,
    "x-overflow": _one_of(OVERFLOW_VALUES, "invalid_overflow"),
    "x-queue-mode": _queue_mode,  # "lazy": the queue pages at once (paging.py)
    "x-queue-type": check_type_argument,
    "x-single-active-consumer": _bool,
    "x-delivery-limit": _non_negative,
}

# A stream's: the arguments it takes (the others it refuses, or ignores if unknown).
STREAM_CHECKS: dict[str, Check] = {
    **{name: CHECKS[name] for name in stream_arguments.STREAM_ARGUMENTS if name in CHECKS},
    **stream_arguments.CHECKS,
}


def validate_queue_arguments(arguments: dict[str, Any], what: str) -> None:
    """Raise 406 for the first invalid argument; ``what`` is "queue 'q' in vhost '/'"."""
    checks = CHECKS
    if queue_type(arguments) == STREAM:  # its refusals come first, by name alone
        stream_arguments.check_refused_arguments(arguments, what)
        checks = STREAM_CHECKS
    for name, value in arguments.items():
        check = checks.get(name)
        if check is None:
            continue
        error = check(value)
        if error is None and name == "x-dead-letter-routing-key" and (
                "x-dead-letter-exchange" not in arguments):
            error = "routing_key_but_no_dlx_defined"
        if error is not None:
            raise argument_error(name, error, what)


def argument_error(name: str, error: str, what: str) -> ChannelError:
    """406 in whichever of RabbitMQ's wordings ``error`` calls for."""
    if isinstance(error, InvalidType):
        return ChannelError(PRECONDITION_FAILED,
                            f"invalid type '{error}' for arg '{name}' in {what}")
    return ChannelError(PRECONDITION_FAILED, f"invalid arg '{name}' for {what}: {error}")


def check_integer_argument(name: str, value: Any, what: str) -> int:
    """An integer argument outside queue.declare (basic.consume's ``x-priority``)."""
    error = _int(value)
    if error is not None:
        raise argument_error(name, error, what)
    return int(value)


def check_alternate_exchange(arguments: dict[str, Any], what: str) -> None:
    """exchange.declare's ``alternate-exchange`` must name an exchange (a longstr)."""
    if "alternate-exchange" in arguments:
        error = _exchange_name(arguments["alternate-exchange"])
        if error is not None:
            raise argument_error("alternate-exchange", error, what)
