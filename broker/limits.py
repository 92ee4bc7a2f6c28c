"""Vhost, user and node limits, with RabbitMQ 3.10's codes and texts.

Limits are plain ``{"max-connections": n, ...}`` dicts on the vhost and the
user, as in definitions files (``parameters`` of component ``vhost-limits``,
and ``limits`` on a user). A negative value (RabbitMQ's ``-1``) or a missing
key means no limit; ``0`` means none allowed. Each check is a pure function
of counts, raising the error the caller maps to its reply:

* vhost ``max-connections``: connection.open → 530 "access to vhost 'v' refused
  for user 'u': connection limit (n) is reached";
* user ``max-connections``: connection.open → 530 "connection refused for user
  'u': user connection limit (n) is reached";
* user ``max-channels``: channel.open → 530 (connection) "number of channels
  opened for user 'u' has reached the maximum allowed user limit of (n)";
* vhost ``max-queues``: queue.declare of a new queue → 406 "cannot declare queue
  'q': queue limit in vhost 'v' (n) is reached";
* node ``connection_max``: as RabbitMQ's ranch limit, a connection over it is
  accepted and closed at once, before the protocol header (``server.py``).
"""

from __future__ import annotations

from typing import Any

from leveret.model.errors import NOT_ALLOWED, PRECONDITION_FAILED, ChannelError, ConnectionError_

VHOST_LIMITS = ("max-connections", "max-queues")
USER_LIMITS = ("max-connections", "max-channels")


def validate(limits: Any, known: tuple[str, ...]) -> dict[str, int]:
    """A limits JSON object, checked as rabbitmqctl does (ValueError with the reason)."""
    if not isinstance(limits, dict):
        raise ValueError("limits must be a JSON object")
    out = {}
    for key, value in limits.items():
        if key not in known:
            raise ValueError(f"Unrecognised terms [{{<<\"{key}\">>,{value}}}] in limits")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{key} must be an integer, got {value!r}")
        out[key] = value
    return out


def _limit(limits: dict[str, int], key: str) -> int | None:
    value = limits.get(key)
    return None if value is None or value < 0 else value


def check_vhost_connections(limits: dict[str, int], count: int, vhost: str, user: str) -> None:
    limit = _limit(limits, "max-connections")
    if limit is not None and count >= limit:
        raise ConnectionError_(NOT_ALLOWED, f"access to vhost '{vhost}' refused for user "
                               f"'{user}': connection limit ({limit}) is reached", (10, 40))


def check_user_connections(limits: dict[str, int], count: int, user: str) -> None:
    limit = _limit(limits, "max-connections")
    if limit is not None and count >= limit:
        raise ConnectionError_(NOT_ALLOWED, f"connection refused for user '{user}': user "
                               f"connection limit ({limit}) is reached", (10, 40))


def check_user_channels(limits: dict[str, int], count: int, user: str) -> None:
    limit = _limit(limits, "max-channels")
    if limit is not None and count >= limit:
        raise ConnectionError_(NOT_ALLOWED, f"number of channels opened for user '{user}' has "
                               f"reached the maximum allowed user limit of ({limit})", (20, 10))


def check_vhost_queues(limits: dict[str, int], count: int, queue: str, vhost: str) -> None:
    limit = _limit(limits, "max-queues")
    if limit is not None and count >= limit:
        raise ChannelError(PRECONDITION_FAILED, f"cannot declare queue '{queue}': queue limit "
                           f"in vhost '{vhost}' ({limit}) is reached", (50, 10))
