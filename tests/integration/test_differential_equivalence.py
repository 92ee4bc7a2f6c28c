"""Redeclaring a queue with other arguments, as RabbitMQ 3.10.8 answers it (both brokers).

Each case declares a queue, redeclares it and records the reply text (or ``ok``), run
against the ``target`` fixture: Leveret, and the real RabbitMQ on 127.0.0.1:5672 when one
runs (skipped otherwise), so a RabbitMQ run proves the table. It covers which argument is
named first when several differ (the existing queue's type decides the order), values of
different types (integer widths are one class; the same bytes or seconds are the same
value), how each side is printed, and that a redeclare's arguments are compared, not
validated. Values go out in the wire type they name (Leveret's typed field tables are
installed in this process, as in ``test_field_types.py``). Over HTTP, a JSON integer is a
long, as RabbitMQ reads it.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from typing import Any

import aiormq
import pytest

from leveret.model import field_table as ft

ft.install()

Target = Any
L = ft.Long
Q = "<q>"


def _differ(arg: str, received: str, current: str) -> str:
    return (f"PRECONDITION_FAILED - inequivalent arg '{arg}' for queue '{Q}' in vhost '/': "
            f"received {received} but current is {current}")


CLASSIC_ALL = {"x-expires": L(100000), "x-message-ttl": L(1000), "x-dead-letter-exchange": "a",
               "x-dead-letter-routing-key": "a", "x-max-length": L(10),
               "x-max-length-bytes": L(10), "x-max-priority": L(3), "x-overflow": "drop-head",
               "x-queue-mode": "default", "x-queue-version": L(1),
               "x-single-active-consumer": False}
QUORUM_ALL = {"x-queue-type": "quorum", "x-dead-letter-exchange": "a",
              "x-dead-letter-routing-key": "a", "x-dead-letter-strategy": "at-most-once",
              "x-expires": L(100000), "x-max-length": L(10), "x-max-length-bytes": L(10),
              "x-overflow": "drop-head", "x-single-active-consumer": False,
              "x-delivery-limit": L(1), "x-message-ttl": L(1000),
              "x-queue-leader-locator": "client-local"}


def _changed(args: dict[str, Any], keep: tuple[str, ...] = ("x-queue-type",)) -> dict[str, Any]:
    """Every argument different (in reverse order, which must not matter)."""
    other = {"a": "b", "drop-head": "reject-publish", "default": "lazy", False: True,
             "at-most-once": "at-least-once", "client-local": "balanced"}
    return {k: (v if k in keep else L(int(v) + 1) if isinstance(v, ft.Long) else other[v])
            for k, v in reversed(args.items())}


# (declared with, redeclared with, durable, RabbitMQ 3.10.8's answer)
CASES: list[tuple[dict[str, Any], dict[str, Any], bool, str]] = [
    # Which one is named first: the queue type's own order, not the client's.
    ({"x-max-length": L(10), "x-message-ttl": L(1000)},
     {"x-max-length": L(20), "x-message-ttl": L(2000)}, False,
     _differ("x-message-ttl", "'2000'", "'1000'")),
    (CLASSIC_ALL, _changed(CLASSIC_ALL), False, _differ("x-expires", "'100001'", "'100000'")),
    (CLASSIC_ALL, {**_changed(CLASSIC_ALL), "x-expires": L(100000)}, False,
     _differ("x-message-ttl", "'1001'", "'1000'")),
    (CLASSIC_ALL, {**CLASSIC_ALL, "x-single-active-consumer": True, "x-queue-type": "quorum"},
     False, _differ("x-single-active-consumer", "'true'", "'false'")),
    (QUORUM_ALL, _changed(QUORUM_ALL), True, _differ("x-dead-letter-exchange", "'b'", "'a'")),
    (QUORUM_ALL, {**QUORUM_ALL, "x-message-ttl": L(5), "x-max-length": L(5)}, True,
     _differ("x-max-length", "'5'", "'10'")),
    (QUORUM_ALL, {**QUORUM_ALL, "x-message-ttl": L(5), "x-queue-type": "classic"}, True,
     _differ("x-queue-type", "'classic'", "'quorum'")),
    # Arguments a classic queue does not compare.
    ({}, {"x-delivery-limit": L(3), "x-max-age": "1D", "x-queue-leader-locator": "balanced"},
     False, "ok"),
    # Types: integer widths are one class, f and d another; the same bytes or seconds match.
    ({"x-max-length": ft.SignedInt(10)}, {"x-max-length": L(10)}, False, "ok"),
    ({"x-max-priority": L(3)}, {"x-max-priority": ft.Byte(3)}, False, "ok"),
    ({"x-max-length": ft.SignedInt(10)}, {"x-max-length": L(11)}, False,
     _differ("x-max-length", "'11'", "'10'")),
    ({"x-dead-letter-exchange": "a"}, {"x-dead-letter-exchange": bytearray(b"a")}, False, "ok"),
    ({"x-message-ttl": L(3)},
     {"x-message-ttl": datetime.datetime(1970, 1, 1, 0, 0, 3, tzinfo=datetime.UTC)}, False, "ok"),
    ({"x-message-ttl": L(10)}, {"x-message-ttl": 10.0}, False,
     _differ("x-message-ttl", "'10.0'", "'10'")),
    ({"x-message-ttl": L(3)}, {"x-message-ttl": ft.Float(3.5)}, False,
     _differ("x-message-ttl", "'3.5'", "'3'")),
    ({"x-single-active-consumer": True}, {"x-single-active-consumer": ft.Byte(1)}, False,
     _differ("x-single-active-consumer", "'1'", "'true'")),
    ({"x-dead-letter-exchange": "a"}, {"x-dead-letter-exchange": L(1)}, False,
     _differ("x-dead-letter-exchange", "'1'", "'a'")),
    ({"x-message-ttl": L(3)}, {"x-message-ttl": None}, False,
     _differ("x-message-ttl", "none", "'3'")),
    ({"x-max-length": L(10)}, {"x-max-length": {"a": L(1)}}, False,
     _differ("x-max-length", "'[{<<\"a\">>,long,1}]'", "'10'")),
    # Long enough not to expire between the two declares on a busy machine.
    ({"x-expires": L(100000)}, {"x-expires": {"a": "b" * 70, "c": L(1)}}, False,
     _differ("x-expires", "'[{<<\"a\">>,longstr,\n   <<\"" + "b" * 70
             + "\">>},\n  {<<\"c\">>,long,1}]'", "'100000'")),
    ({"x-max-length": L(10)}, {}, False,
     _differ("x-max-length", "none", "the value '10' of type 'long'")),
    ({}, {"x-max-length": L(10)}, False,
     _differ("x-max-length", "the value '10' of type 'long'", "none")),
    # A redeclare's arguments are compared, never validated.
    ({"x-max-length": L(10)}, {"x-max-length": "10"}, False,
     _differ("x-max-length", "'10'", "'10'")),
    ({"x-max-length": L(1)}, {"x-max-length": L(-3)}, False,
     _differ("x-max-length", "'-3'", "'1'")),
    ({}, {"x-expires": "zz"}, False,
     _differ("x-expires", "the value 'zz' of type 'longstr'", "none")),
    ({"x-overflow": "drop-head"}, {"x-overflow": bytearray(b"drop-head")}, False, "ok"),
]


def test_redeclare_with_other_arguments(target: Target) -> None:
    async def run() -> list[str]:
        conn = await aiormq.connect(target.url)
        try:
            seen = []
            for first, second, durable, _ in CASES:
                ch = await conn.channel()
                name = f"deq-{uuid.uuid4().hex[:8]}"
                await ch.queue_declare(name, durable=durable, arguments=first)
                try:
                    await ch.queue_declare(name, durable=durable, arguments=second)
                    seen.append("ok")
                except aiormq.exceptions.ChannelPreconditionFailed as exc:
                    seen.append(str(exc.args[0]).replace(name, Q))
                    ch = await conn.channel()
                await ch.queue_delete(name)
            return seen
        finally:
            await conn.close()

    assert asyncio.run(run()) == [expected for *_, expected in CASES]


# (arguments of the first PUT, of the second, RabbitMQ 3.10.8's reason)
HTTP_CASES: list[tuple[dict[str, Any], dict[str, Any], str]] = [
    ({}, {"x-max-length": 10}, "received the value '10' of type 'long' but current is none"),
    ({"x-max-length": 10}, {}, "received none but current is the value '10' of type 'long'"),
    ({"x-max-length": 10}, {"x-max-length": 11}, "received '11' but current is '10'"),
    ({"x-message-ttl": 10}, {"x-message-ttl": 10.0}, "received '10.0' but current is '10'"),
    ({}, {"x-dead-letter-exchange": [1, "a"]},
     "received the value '[{long,1},{longstr,<<\"a\">>}]' of type 'array' but current is none"),
]


def test_redeclare_over_http_with_other_arguments(target: Target,
                                                  request: pytest.FixtureRequest) -> None:
    http = request.getfixturevalue("api" if target.name == "leveret" else "rabbitmq_http")
    seen = []
    for first, second, _ in HTTP_CASES:
        name = f"deq-h-{uuid.uuid4().hex[:8]}"
        path = f"/queues/%2F/{name}"
        status, _, body = http.put(path, {"auto_delete": True, "arguments": first})
        assert status == 201, body
        status, _, body = http.put(path, {"auto_delete": True, "arguments": second})
        seen.append((status, body["reason"].replace(name, Q)))
        http.delete(path)
    arg = [next(iter({**a, **b})) for a, b, _ in HTTP_CASES]
    assert seen == [(400, f"inequivalent arg '{name}' for queue '{Q}' in vhost '/': {reason}")
                    for name, (_, _, reason) in zip(arg, HTTP_CASES, strict=True)]
