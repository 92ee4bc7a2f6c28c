"""Routing across exchanges: exchange-to-exchange bindings and alternate exchanges.

This is the one place that follows the exchange graph; matchers only know their
own bindings. The rules are RabbitMQ's (``rabbit_exchange:route/3`` and its
``route1``/``process_alternate``/``process_route`` helpers, 3.x to 4.x):

* Routing is a work list of exchanges, starting with the one published to,
  and a seen-set of exchanges. Each exchange is routed with *all* the
  message's routing keys (the routing key plus CC/BCC) and its headers; the
  destinations found are queues (collected once each) or exchanges (added to
  the work list unless already seen). So a cycle of E2E bindings terminates,
  and a queue reachable along several paths (a diamond) gets one copy.
* The alternate exchange is consulted **per exchange in the graph**, not just
  for the one published to: whenever an exchange being routed (the first one,
  one reached through an E2E binding, or itself an AE) finds *no destinations
  at all* for the message, its ``alternate-exchange`` is looked up and, if it
  exists and has not been seen, routed through next. "No destinations"
  counts exchange destinations too: an exchange whose only match is an E2E
  binding to an exchange that routes nowhere does not use its own AE (the
  downstream exchange's AE applies instead). AEs therefore chain, and an AE
  cycle stops at the first exchange seen twice. A missing AE is skipped.
  (RabbitMQ's docs/ae.md phrases this as "cannot route to any queue"; the
  code's test is the one above, and it is the one implemented here.)
* Queue order in the result is discovery order; RabbitMQ gives no order.

What is not here: the default exchange (an implicit binding of every queue by
name, with no AE support) is the caller's special case. An AE set by policy
is already folded into ``Exchange.alternate_exchange``.

``route_message`` is the publish's entry (the broker's publish calls it for an exchange it
found): a message's headers are decoded only when an exchange on the way may match on them,
and an exchange bound only to queues, with no CC/BCC keys, routes in one matcher call whose
result (a direct or fanout exchange's prebuilt tuple) is returned as it is. This module is
compiled (``node/compiled.py``), so that call costs no interpreted frame.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from .binding import Matcher
from .exchange import Exchange
from .headers import HeadersMatcher

Lookup = Callable[[str], Exchange | None]


class Routed(Protocol):
    """What routing reads of a message."""

    @property
    def routing_key(self) -> str: ...

    @property
    def headers(self) -> dict[str, Any] | None:
        """Decoded on first use; ``ValueError`` if malformed (the caller's protocol error)."""


def route_message(exchange: Exchange, message: Routed, exchanges: Mapping[str, Exchange],
                  extra_routing_keys: Sequence[str] = ()) -> Sequence[object]:
    """``route`` for a published message, in ``exchanges`` (its vhost's); the caller has
    checked that ``exchange`` takes publishes. Read-only: the result may be the matcher's."""
    matcher = exchange.matcher
    if (not extra_routing_keys and type(matcher) is not HeadersMatcher
            and not matcher.exchange_bindings):
        dests = matcher.route(message.routing_key, None)
        if dests or exchange.alternate_exchange is None:  # only queues, already unique
            return dests  # type: ignore[return-value]  # every matcher returns a sequence
    return route(exchange, message.routing_key, routing_headers(exchange, message),
                 exchanges.get, extra_routing_keys)


def routing_headers(exchange: Exchange, message: Routed) -> dict[str, Any] | None:
    """The message's headers when an exchange on the way may match on them, else None:
    decoding them is work the commonest routes don't need."""
    if (type(exchange.matcher) is HeadersMatcher or exchange.matcher.exchange_bindings
            or "alternate-exchange" in exchange.arguments
            or exchange.policy_alternate_exchange is not None):
        return message.headers
    return None


def route(
    exchange: Exchange,
    routing_key: str,
    headers: dict[str, Any] | None,
    lookup: Lookup,
    extra_routing_keys: Sequence[str] = (),
) -> list[object]:
    """The queues a message published to ``exchange`` reaches, each once.

    ``lookup`` resolves alternate-exchange names (in the exchange's vhost);
    ``extra_routing_keys`` are the CC/BCC keys, routed as well as
    ``routing_key`` (the union is taken).
    """
    matcher = exchange.matcher
    if not extra_routing_keys and not matcher.exchange_bindings:
        # Fast path: only queues can come out, already unique; no graph to walk.
        dests = matcher.route(routing_key, headers)
        if dests or exchange.alternate_exchange is None:
            return list(dests)
    keys = (routing_key, *extra_routing_keys)
    return _route_graph(exchange, keys, headers, lookup)


def _route_graph(
    start: Exchange, keys: Sequence[str], headers: dict[str, Any] | None, lookup: Lookup
) -> list[object]:
    queues: dict[int, object] = {}
    seen: set[Exchange] = {start}
    work = [start]
    while work:
        exchange = work.pop()
        dests = _destinations(exchange.matcher, keys, headers)
        found_any = False
        for dest in dests:
            found_any = True
            if isinstance(dest, Exchange):
                if dest not in seen:
                    seen.add(dest)
                    work.append(dest)
            else:
                queues.setdefault(id(dest), dest)
        if not found_any:
            name = exchange.alternate_exchange
            if name is not None:
                alternate = lookup(name)
                if alternate is not None and alternate not in seen:
                    seen.add(alternate)
                    work.append(alternate)
    return list(queues.values())


def _destinations(
    matcher: Matcher, keys: Sequence[str], headers: dict[str, Any] | None
) -> Iterable[object]:
    """The union of the matcher's destinations over every routing key, each once."""
    if len(keys) == 1:
        return matcher.route(keys[0], headers)
    found: dict[int, object] = {}
    for key in keys:
        for dest in matcher.route(key, headers):
            found.setdefault(id(dest), dest)
    return found.values()


# One exchange a traced message went through: its name, how it was reached ("published",
# "exchange-binding" from an exchange routed before it, "alternate-exchange" of one that
# found nothing), and what its bindings matched, as ("queue" | "exchange", name) pairs.
Step = tuple[str, str, tuple[tuple[str, str], ...]]


def explain(
    exchange: Exchange,
    routing_key: str,
    headers: dict[str, Any] | None,
    lookup: Lookup,
    extra_routing_keys: Sequence[str] = (),
) -> tuple[Step, ...]:
    """The walk ``route`` makes for a message, step by step, for message tracing.

    Called only while tracing is on, after ``route`` (so it walks the graph a second time
    rather than slowing the untraced path); same rules, same order.
    """
    keys = (routing_key, *extra_routing_keys)
    steps: list[Step] = []
    seen: set[Exchange] = {exchange}
    work: list[tuple[Exchange, str]] = [(exchange, "published")]
    while work:
        current, via = work.pop()
        matched: list[tuple[str, str]] = []
        for dest in _destinations(current.matcher, keys, headers):
            if isinstance(dest, Exchange):
                matched.append(("exchange", dest.name))
                if dest not in seen:
                    seen.add(dest)
                    work.append((dest, "exchange-binding"))
            else:
                matched.append(("queue", str(getattr(dest, "name", dest))))
        steps.append((current.name, via, tuple(matched)))
        if not matched and current.alternate_exchange is not None:
            alternate = lookup(current.alternate_exchange)
            if alternate is not None and alternate not in seen:
                seen.add(alternate)
                work.append((alternate, "alternate-exchange"))
    return tuple(steps)
