"""Policies: operator-set defaults for queues and exchanges, matched by name.

Theory of operation
-------------------
A policy is (vhost, name, pattern, apply-to, priority, definition). The
pattern is a regular expression *searched* in the entity's name (RabbitMQ
uses ``re:run`` without anchors, so ``"^q"`` and ``"q"`` differ). Of the
policies of the entity's vhost whose apply-to covers its kind and whose
pattern matches, the one with the highest priority wins — *alone*: RabbitMQ
never merges definitions across policies (ties: the first by name here;
RabbitMQ leaves ties unspecified). A quorum queue skips policies carrying
keys that do not apply to it (``rabbit_quorum_queue:is_policy_applicable``;
none of the keys Leveret supports is in that list, so this never triggers
today).

The winning policy is combined with the queue's ``x-`` arguments key by key,
as ``rabbit_amqqueue_process:process_args_policy`` (classic) and
``rabbit_quorum_queue`` do it (``args_policy_lookup``): only one side set →
that side; both set → a per-key resolution:

==========================  ===========  ============
key                          classic      quorum
==========================  ===========  ============
message-ttl, expires,        min          min
max-length, max-length-bytes,
delivery-limit
dead-letter-exchange,        argument     argument
dead-letter-routing-key
overflow                     argument     **policy**
==========================  ===========  ============

A stream (``stream.py``) reads only ``max-length-bytes`` and ``max-age``, and for
both the policy wins over the argument, as in RabbitMQ.

The result is a ``QueueSettings`` (``settings.py``); queue features read only
that, so applying a policy is ``queue.apply_settings(...)``. Keys that
policies cannot set (``max-priority``, ``queue-type``, single active
consumer) come from the arguments alone. For exchanges the keys are
``alternate-exchange``, where the argument wins (``Exchange.alternate_exchange``), and the
deduplication plugin's ``x-cache-size``, ``x-cache-ttl`` and ``x-cache-persistence``, which
fill in what a deduplicating exchange's arguments leave unset (``broker/dedupe.py``).

Patterns are compiled by RE2 (``model.name_pattern``, case-sensitive): every
declare searches them in a client-chosen name, which a backtracking engine would
let a policymaker's pattern turn into seconds of a stalled loop.

``validate`` checks a policy the way ``rabbitmqctl set_policy`` does and
raises ``PolicyError`` with RabbitMQ's texts. Nothing here does I/O;
``PolicySet`` holds one vhost's policies and ``VirtualHost`` persists them and
re-applies them when they change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from leveret.model.name_pattern import NamePattern, PatternError, compile_pattern
from leveret.queues.settings import (
    DROP_HEAD,
    REJECT_PUBLISH,
    REJECT_PUBLISH_DLX,
    QueueSettings,
    from_arguments,
)
from leveret.queues.stream_arguments import parse_max_age

APPLY_TO = ("queues", "exchanges", "all")
OVERFLOW_VALUES = (DROP_HEAD, REJECT_PUBLISH, REJECT_PUBLISH_DLX)

# Policy key -> QueueSettings field, for the keys policies may set on queues.
QUEUE_KEYS = {
    "message-ttl": "message_ttl",
    "expires": "expires",
    "max-length": "max_length",
    "max-length-bytes": "max_length_bytes",
    "overflow": "overflow",
    "dead-letter-exchange": "dead_letter_exchange",
    "dead-letter-routing-key": "dead_letter_routing_key",
    "delivery-limit": "delivery_limit",
    "max-age": "max_age",
}
# The deduplication plugin's window keys (its ``Policies`` validator): they fill in what a
# deduplicating exchange's own arguments leave unset (``model/dedupe.py``).
DEDUPE_KEYS = ("x-cache-size", "x-cache-ttl", "x-cache-persistence")
EXCHANGE_KEYS = ("alternate-exchange", *DEDUPE_KEYS)

MIN = "min"
ARGUMENT = "argument"
POLICY = "policy"
# How a key is resolved when both the policy and the queue's argument set it.
RESOLUTION: dict[str, dict[str, str]] = {
    "classic": {
        "message-ttl": MIN, "expires": MIN, "max-length": MIN, "max-length-bytes": MIN,
        "delivery-limit": MIN, "dead-letter-exchange": ARGUMENT,
        "dead-letter-routing-key": ARGUMENT, "overflow": ARGUMENT, "max-age": ARGUMENT,
    },
}
RESOLUTION["quorum"] = {**RESOLUTION["classic"], "overflow": POLICY}
# A stream reads only its retention, where the policy wins (rabbit_stream_queue
# ``policy_precedence``); the other keys do not apply to it.
RESOLUTION["stream"] = {**RESOLUTION["classic"], "max-length-bytes": POLICY, "max-age": POLICY}

# Keys that make a policy inapplicable to a quorum queue (RabbitMQ 3.10's list,
# restricted to keys Leveret knows: currently none of them, see the header).
QUORUM_INAPPLICABLE: frozenset[str] = frozenset()


class PolicyError(Exception):
    """A policy failed validation; ``str()`` is RabbitMQ's text (after "Validation failed")."""


@dataclass(frozen=True)
class Policy:
    vhost: str
    name: str
    pattern: str
    apply_to: str = "all"
    definition: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    regex: NamePattern = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", compile_pattern(self.pattern, caseless=False))

    def applies_to(self, kind: str, name: str) -> bool:
        """``kind`` is "queues" or "exchanges"."""
        return self.apply_to in (kind, "all") and self.regex.search(name) is not None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(ok: bool, value: Any, what: str) -> None:
    if not ok:
        raise PolicyError(f"{_erl(value)} is not a valid {what}")


def _erl(value: Any) -> str:
    """A JSON value as RabbitMQ prints it in validation errors (strings as binaries)."""
    if isinstance(value, str):
        return f'<<"{value}">>'
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _validate_key(key: str, value: Any) -> None:
    if key == "message-ttl":
        _check(_is_int(value) and value >= 0, value, "message TTL")
    elif key == "expires":
        _check(_is_int(value) and value >= 1, value, "queue expiry")
    elif key == "max-length":
        _check(_is_int(value) and value >= 0, value, "maximum length")
    elif key == "max-length-bytes":
        _check(_is_int(value) and value >= 0, value, "maximum length in bytes")
    elif key == "max-age":
        _check(parse_max_age(value) is not None, value, "max-age")
    elif key == "delivery-limit":
        _check(_is_int(value) and value >= 0, value, "delivery limit")
    elif key == "overflow":
        _check(value in OVERFLOW_VALUES, value, "overflow value")
    elif key == "dead-letter-exchange":
        _check(isinstance(value, str), value, "dead letter exchange name")
    elif key == "dead-letter-routing-key":
        _check(isinstance(value, str), value, "dead letter routing key")
    elif key == "alternate-exchange":
        _check(isinstance(value, str), value, "alternate exchange name")
    elif key in ("x-cache-size", "x-cache-ttl"):  # the plugin's texts
        if not (_is_int(value) and value > 0):
            raise PolicyError(f"'{key}' must be an integer greater than 0, got {_erl(value)}")
    elif key == "x-cache-persistence" and value not in ("disk", "memory"):
        raise PolicyError(f"'x-cache-persistence' must be either 'disk' or 'memory', "
                          f"got {_erl(value)}")


def validate(vhost: str, name: str, pattern: str, definition: Any, priority: Any = 0,
             apply_to: str = "all") -> Policy:
    """A checked ``Policy``, or ``PolicyError`` with rabbitmqctl's message."""
    if not isinstance(definition, dict) or not definition:
        raise PolicyError("no policy provided")
    unknown = [(k, v) for k, v in definition.items()
               if k not in QUEUE_KEYS and k not in EXCHANGE_KEYS]
    if unknown:
        terms = ",".join(f'{{<<"{k}">>,{_erl(v)}}}' for k, v in unknown)
        raise PolicyError(f"[{terms}] are not recognised policy settings")
    for key, value in definition.items():
        _validate_key(key, value)
    if apply_to not in APPLY_TO:
        raise PolicyError(
            f"apply-to '{apply_to}' unrecognised; should be 'queues', 'exchanges' or 'all'")
    if not _is_int(priority):
        raise PolicyError(f"{_erl(priority)} is not a valid priority")
    try:
        compile_pattern(pattern, caseless=False)
    except PatternError as exc:
        raise PolicyError(f"pattern should be regular expression but is invalid: {exc}") from None
    return Policy(vhost, name, pattern, apply_to, dict(definition), priority)


def select(policies: Iterable[Policy], kind: str, name: str,
           queue_type: str = "classic") -> Policy | None:
    """The policy that applies to entity ``name`` of ``kind`` ("queues" | "exchanges")."""
    best: Policy | None = None
    for policy in policies:
        if not policy.applies_to(kind, name):
            continue
        if queue_type == "quorum" and QUORUM_INAPPLICABLE.intersection(policy.definition):
            continue
        if best is None or policy.priority > best.priority or (
                policy.priority == best.priority and policy.name < best.name):
            best = policy
    return best


def queue_settings(arguments: dict[str, Any], policy: Policy | None) -> QueueSettings:
    """Effective settings of a queue with ``arguments`` under ``policy`` (None: arguments only)."""
    settings = from_arguments(arguments)
    if policy is None:
        return settings
    rules = RESOLUTION.get(settings.queue_type, RESOLUTION["classic"])
    changes: dict[str, Any] = {}
    for key, attr in QUEUE_KEYS.items():
        if key not in policy.definition:
            continue
        value = policy.definition[key]
        if f"x-{key}" not in arguments or getattr(settings, attr) is None:
            changes[attr] = value
            continue
        rule = rules[key]
        if rule == MIN:
            changes[attr] = min(value, getattr(settings, attr))
        elif rule == POLICY:
            changes[attr] = value
    return dataclasses.replace(settings, **changes) if changes else settings


def dedupe_keys(policy: Policy | None) -> dict[str, Any]:
    """The deduplication window keys a policy sets on an exchange."""
    if policy is None:
        return {}
    return {k: v for k, v in policy.definition.items() if k in DEDUPE_KEYS}


def alternate_exchange(policy: Policy | None) -> str | None:
    """The AE a policy sets on an exchange (the exchange's own argument wins over it)."""
    if policy is None:
        return None
    value = policy.definition.get("alternate-exchange")
    return value if isinstance(value, str) else None


class PolicySet:
    """One vhost's policies by name (plain data; the vhost persists and applies them)."""

    def __init__(self) -> None:
        self.by_name: dict[str, Policy] = {}

    def __bool__(self) -> bool:
        return bool(self.by_name)

    def __iter__(self) -> Any:
        return iter(self.by_name.values())

    def put(self, policy: Policy) -> None:
        self.by_name[policy.name] = policy

    def remove(self, name: str) -> Policy | None:
        return self.by_name.pop(name, None)

    def for_queue(self, name: str, arguments: dict[str, Any]) -> QueueSettings:
        queue_type = from_arguments(arguments).queue_type
        return queue_settings(arguments, select(self, "queues", name, queue_type))

    def for_exchange(self, name: str) -> Policy | None:
        return select(self, "exchanges", name)
