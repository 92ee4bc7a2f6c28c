"""What a stream accepts: its declare properties and arguments, and its consumers' arguments.

RabbitMQ's contract (``rabbit_stream_queue`` ``declare/2``, ``consume/3``,
``parse_offset_arg/1``; ``rabbit_amqqueue:check_max_age/1``), with its texts as
RabbitMQ 3.10 answers them (probed). A known RabbitMQ queue argument a stream
cannot honour is refused by name before any value is looked at, as 3.10 does
(``x-message-ttl: "bogus"`` gets the queue-type text, not a value error); the
arguments a stream takes are then checked by ``arguments.py``'s table and by the
checks here.

Where 3.10 fails with 541 INTERNAL_ERROR and closes the connection (an
``x-max-age`` such as ``D`` or ``-1s``, an ``x-stream-offset`` of ``"bogus"`` or
of a boolean), Leveret answers the channel-level 406 that later RabbitMQ
versions and the other malformed values get: a typo should not cost a client
its connection. ``x-stream-filter-size-bytes`` is checked as RabbitMQ 3.13+
checks it (16..255; 3.10 has no filters and takes any value).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass

from leveret.model.errors import (
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    ChannelError,
    ConnectionError_,
)
from leveret.model.field_table import Timestamp, type_name

TYPE_NAME = "rabbit_stream_queue"  # the queue type as RabbitMQ's texts name it

# Arguments a stream takes (``capabilities().queue_arguments``, x-queue-type aside).
STREAM_ARGUMENTS = frozenset((
    "x-queue-type", "x-max-length-bytes", "x-max-age", "x-stream-max-segment-size-bytes",
    "x-stream-filter-size-bytes", "x-initial-cluster-size", "x-queue-leader-locator",
))
# RabbitMQ's queue arguments a stream refuses; any other unknown argument passes.
REFUSED_ARGUMENTS = (
    "x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
    "x-max-length", "x-max-in-memory-length", "x-max-in-memory-bytes", "x-max-priority",
    "x-overflow", "x-queue-mode", "x-queue-version", "x-single-active-consumer",
    "x-queue-master-locator", "x-delivery-limit", "x-dead-letter-strategy",
)
# Segment size: RabbitMQ's default and its ceiling (``?MAX_STREAM_MAX_SEGMENT_SIZE``).
DEFAULT_SEGMENT_BYTES = 500_000_000
MAX_SEGMENT_BYTES = 3_000_000_000
FILTER_SIZE_RANGE = (16, 255)
LEADER_LOCATORS = ("client-local", "balanced", "random", "least-leaders")

# x-max-age units (``check_max_age``): Y = 365 days, M = 30 days; case-sensitive.
_DAY_MS = 86_400_000
AGE_UNITS = {"Y": 365 * _DAY_MS, "M": 30 * _DAY_MS, "D": _DAY_MS, "h": 3_600_000,
             "m": 60_000, "s": 1_000}
_AGE = re.compile(r"([0-9]+)([YMDhms])")


def parse_max_age(value: object) -> int | None:
    """``<int><unit>`` in ms, or None if it is not one (or is zero)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    match = _AGE.fullmatch(value)
    if match is None or int(match.group(1)) == 0:
        return None
    return int(match.group(1)) * AGE_UNITS[match.group(2)]


def _max_age(value: object) -> str | None:
    if not isinstance(value, (str, bytes)):
        return f"{{unacceptable_type,{type_name(value)}}}"
    return None if parse_max_age(value) is not None else "invalid_max_age"


def _initial_cluster_size(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f'"expected integer, got {type_name(value)}"'
    if value < 0:
        return f"{{value_negative,{value}}}"
    return "{value_zero,0}" if value == 0 else None


def _leader_locator(value: object) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return f"{{unacceptable_type,{type_name(value)}}}"
    return None if value in LEADER_LOCATORS else "invalid_queue_locator_arg"


def _segment_size(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f'"expected integer, got {type_name(value)}"'
    return f"{{value_negative,{value}}}" if value < 0 else None


# Value checks of the stream's own arguments (``arguments.py`` checks x-max-length-bytes).
CHECKS = {
    "x-max-age": _max_age,
    "x-initial-cluster-size": _initial_cluster_size,
    "x-queue-leader-locator": _leader_locator,
    "x-stream-max-segment-size-bytes": _segment_size,
}


def check_refused_arguments(arguments: Mapping[str, object], what: str) -> None:
    """406 for a RabbitMQ queue argument a stream cannot honour (before value checks)."""
    for name in arguments:
        if name in REFUSED_ARGUMENTS:
            raise ChannelError(PRECONDITION_FAILED,
                               f"invalid arg '{name}' for {what} of queue type {TYPE_NAME}")


def check_declare(*, server_named: bool, durable: bool, exclusive: bool, auto_delete: bool,
                  arguments: Mapping[str, object], what: str) -> None:
    """The stream's declare refusals, in RabbitMQ's order (406 each)."""
    if server_named:
        raise ChannelError(PRECONDITION_FAILED,
                           f"Cannot declare a server-named queue for type {TYPE_NAME}")
    for refused, prop in ((auto_delete, "auto-delete"), (exclusive, "exclusive-owner"),
                          (not durable or exclusive, "non-durable")):
        if refused:
            raise ChannelError(PRECONDITION_FAILED, f"invalid property '{prop}' for {what}")
    segment = arguments.get("x-stream-max-segment-size-bytes")
    if isinstance(segment, int) and segment > MAX_SEGMENT_BYTES:
        raise ChannelError(PRECONDITION_FAILED,
                           "Exceeded max value for x-stream-max-segment-size-bytes")
    if "x-stream-filter-size-bytes" in arguments:
        size = arguments["x-stream-filter-size-bytes"]
        low, high = FILTER_SIZE_RANGE
        # RabbitMQ compares Erlang terms: any non-number is above 255.
        if isinstance(size, bool) or not isinstance(size, int) or not low <= size <= high:
            raise ChannelError(PRECONDITION_FAILED,
                               "Invalid value for  x-stream-filter-size-bytes")


# -- consumers ---------------------------------------------------------------------------

FIRST = "first"
LAST = "last"
NEXT = "next"
OFFSET = "offset"
TIMESTAMP = "timestamp"


@dataclass(frozen=True)
class OffsetSpec:
    """Where a consumer starts: ``first``/``last``/``next``, an ``offset``, or a
    ``timestamp`` (ms since the epoch: the first chunk written at or after it)."""

    kind: str
    value: int = 0


CONSUMER_ARGUMENTS = frozenset((
    "x-stream-offset", "x-stream-filter", "x-stream-match-unfiltered",
    "x-stream-offset-tracking",
))
# Consumer arguments RabbitMQ knows and a stream refuses (``consume_invalid_arg``).
REFUSED_CONSUMER_ARGUMENTS = ("x-priority", "x-cancel-on-ha-failover")


def check_consume(*, no_ack: bool, prefetch: int, global_prefetch: int,
                  arguments: Mapping[str, object], what: str) -> None:
    """basic.consume on a stream, as RabbitMQ 3.10 answers it: 540 (connection) for no-ack,
    406 without a consumer prefetch, 540 under a global prefetch, 406 for refused arguments.

    A global prefetch alone leaves the consumer prefetch at 0, so it is refused as
    "prefetch count is not set", as in 3.10."""
    if no_ack:
        raise ConnectionError_(NOT_IMPLEMENTED,
                               f"automatic acknowledgement not supported by stream queues {what}",
                               (60, 20))
    if not prefetch:
        raise ChannelError(PRECONDITION_FAILED, f"consumer prefetch count is not set for '{what}'")
    if global_prefetch:
        raise ConnectionError_(NOT_IMPLEMENTED, f"{what} does not support global qos", (60, 20))
    for name in arguments:
        if name in REFUSED_CONSUMER_ARGUMENTS:
            raise ChannelError(PRECONDITION_FAILED,
                               f"invalid arg '{name}' for {what} of queue type {TYPE_NAME}")


def _erlang_term(value: object) -> str:
    """How RabbitMQ prints a refused offset argument: ``{longstr,<<"0s">>}``."""
    if isinstance(value, (str, bytes)):
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        return f'{{longstr,<<"{text}">>}}'
    if isinstance(value, bool):
        return f"{{bool,{str(value).lower()}}}"
    return f"{{{type_name(value)},{value}}}"


def parse_offset(value: object, now_ms: int, what: str) -> OffsetSpec:
    """``x-stream-offset`` (absent: ``next``), or 406 naming it."""
    if value is None:
        return OffsetSpec(NEXT)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        if value in (FIRST, LAST, NEXT):
            return OffsetSpec(value)
        age = parse_max_age(value)
        if age is not None:
            return OffsetSpec(TIMESTAMP, now_ms - age)
    elif isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return OffsetSpec(TIMESTAMP, int(value.timestamp()) * 1000)
    elif isinstance(value, Timestamp):
        return OffsetSpec(TIMESTAMP, int(value) * 1000)
    elif isinstance(value, int) and not isinstance(value, bool):
        return OffsetSpec(OFFSET, int(value))
    raise ChannelError(PRECONDITION_FAILED,
                       f"invalid arg 'x-stream-offset' for {what}: "
                       f"{{invalid_stream_offset_arg,{_erlang_term(value)}}}")


def parse_filter(arguments: Mapping[str, object]) -> tuple[frozenset[str] | None, bool]:
    """``x-stream-filter`` (a string or an array of strings, any of which matches; None:
    no filtering) and ``x-stream-match-unfiltered`` (also deliver messages without
    ``x-stream-filter-value``), as RabbitMQ's ``filter_spec/1`` reads them. Leveret's
    filter is exact where RabbitMQ's Bloom filter lets false positives through."""
    value = arguments.get("x-stream-filter")
    if isinstance(value, (str, bytes)):
        values = [value]
    elif isinstance(value, list):
        values = [v for v in value if isinstance(v, (str, bytes))]
    else:
        return None, False
    filters = frozenset(v.decode("utf-8", "replace") if isinstance(v, bytes) else v
                        for v in values)
    return filters, arguments.get("x-stream-match-unfiltered") is True


def refused_operation(operation: str, what: str, method: tuple[int, int]) -> ConnectionError_:
    """540 for what a stream cannot do (basic.get, queue.purge), closing the connection."""
    return ConnectionError_(NOT_IMPLEMENTED, f"{operation} not supported by stream queues {what}",
                            method)
