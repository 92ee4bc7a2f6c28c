"""A queue's effective settings: declared arguments combined with policies.

Queue features (TTL, limits, dead-lettering, priorities, ...) read their
parameters from ``Queue.settings``, never from the raw arguments, so that a
policy change applies to a live queue by replacing one object. ``from_arguments``
covers queues without policies; the policy module combines both with
RabbitMQ's precedence rules and calls ``Queue.apply_settings``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DROP_HEAD = "drop-head"
REJECT_PUBLISH = "reject-publish"
REJECT_PUBLISH_DLX = "reject-publish-dlx"


@dataclass(frozen=True)
class QueueSettings:
    message_ttl: int | None = None  # ms
    expires: int | None = None  # ms
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = DROP_HEAD
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    max_priority: int | None = None  # arguments only: policies cannot set it
    delivery_limit: int | None = None
    single_active_consumer: bool = False  # arguments only
    queue_type: str = "classic"  # arguments only
    lazy: bool = False  # x-queue-mode "lazy" (arguments only): pages at once (paging.py)
    max_age: str | None = None  # a stream's retention, "<int><unit>" (stream_arguments.py)


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def from_arguments(arguments: dict[str, Any]) -> QueueSettings:
    """Settings from validated ``x-`` arguments alone (see ``arguments.py`` for validation)."""
    get = arguments.get
    return QueueSettings(
        message_ttl=_int(get("x-message-ttl")),
        expires=_int(get("x-expires")),
        max_length=_int(get("x-max-length")),
        max_length_bytes=_int(get("x-max-length-bytes")),
        overflow=_text(get("x-overflow")) or DROP_HEAD,
        dead_letter_exchange=_text(get("x-dead-letter-exchange")),
        dead_letter_routing_key=_text(get("x-dead-letter-routing-key")),
        max_priority=_int(get("x-max-priority")),
        delivery_limit=_int(get("x-delivery-limit")),
        single_active_consumer=get("x-single-active-consumer") is True,
        queue_type=_text(get("x-queue-type")) or "classic",
        lazy=_text(get("x-queue-mode")) == "lazy",
        max_age=_text(get("x-max-age")),
    )
