"""Bindings as RabbitMQ 3.10.8 makes them, the same program on both brokers.

Each test runs against the ``target`` fixture: Leveret, and the real RabbitMQ on
127.0.0.1:5672 when one runs (skipped otherwise), so a RabbitMQ run proves the
expectation. Covered here:

* queue.bind / queue.unbind against another connection's exclusive queue: which check
  answers first (403, 404, 406, 405), and an unbind of nothing being unbind-ok; the same
  order for exchange.bind / exchange.unbind;
* a headers exchange comparing arrays and tables with their elements' wire types (and a
  nested table's key order), where top-level numbers match across widths; a binding made
  over HTTP has JSON's types as RabbitMQ reads them (an integer is a long);
* the 406 text for an ``x-match`` that is not a string, for each field type, with Erlang's
  ``~p`` layout (line breaks at 80 columns) and RabbitMQ's cut of a text past 255 bytes.

The aiormq cases send exact wire types with Leveret's typed field-table codec installed in
this process (as ``test_field_types.py`` does).
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import aiormq
import pika
import pytest
from pamqp import commands

from leveret.model import field_table as ft

ft.install()  # send every value in the wire type it names

Target = Any


def _locked(queue: str) -> tuple[int, str]:
    return (405, f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{queue}' "
                 "in vhost '/'. It could be originally declared on another connection or the "
                 "exclusive property value does not match that of the original declaration.")


def _outcome(conn: pika.BlockingConnection, op: Callable[[Any], object]) -> object:
    ch = conn.channel()
    try:
        op(ch)
    except pika.exceptions.ChannelClosedByBroker as exc:
        return (exc.reply_code, exc.reply_text)
    ch.close()
    return "ok"


def test_bind_and_unbind_on_another_connections_exclusive_queue(target: Target) -> None:
    """rabbit_binding:remove answers unbind-ok when there is nothing to remove, before it
    asks about exclusivity; rabbit_binding:add checks the exchange, the queue and the
    binding's arguments before it."""
    owner = target.connect().channel()
    q = owner.queue_declare("", exclusive=True).method.queue
    owner.queue_bind(q, "amq.direct", "k")
    owner.queue_bind(q, "amq.headers", arguments={"a": 1})
    other = target.connect()
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    cases: list[tuple[Callable[[Any], object], object]] = [
        # Nothing to remove: unbind-ok, whoever owns the queue.
        (lambda ch: ch.queue_unbind(q, "amq.direct", "other-key"), "ok"),
        (lambda ch: ch.queue_unbind(q, "amq.headers", arguments={"a": 2}), "ok"),
        (lambda ch: ch.queue_unbind(q, "amq.headers", arguments={"x-match": "bad"}), "ok"),
        (lambda ch: ch.queue_unbind(q, missing, "k"), "ok"),
        (lambda ch: ch.queue_unbind(missing, "amq.direct", "k"), "ok"),
        # A binding that exists is the owner's to remove.
        (lambda ch: ch.queue_unbind(q, "amq.direct", "k"), _locked(q)),
        (lambda ch: ch.queue_unbind(q, "amq.headers", arguments={"a": 1}), _locked(q)),
        # The default exchange is refused before anything is looked up.
        (lambda ch: ch.queue_unbind(missing, "", "k"),
         (403, "ACCESS_REFUSED - operation not permitted on the default exchange")),
        (lambda ch: ch.queue_bind(q, "", q),
         (403, "ACCESS_REFUSED - operation not permitted on the default exchange")),
        # queue.bind: the exchange, then the queue, then the arguments, then exclusivity.
        (lambda ch: ch.queue_bind(missing, missing, "k"),
         (404, f"NOT_FOUND - no exchange '{missing}' in vhost '/'")),
        (lambda ch: ch.queue_bind(q, missing, "k"),
         (404, f"NOT_FOUND - no exchange '{missing}' in vhost '/'")),
        (lambda ch: ch.queue_bind(missing, "amq.direct", "k"),
         (404, f"NOT_FOUND - no queue '{missing}' in vhost '/'")),
        (lambda ch: ch.queue_bind(q, "amq.headers", arguments={"x-match": "bad"}),
         (406, "PRECONDITION_FAILED - Invalid x-match field value <<\"bad\">>; expected all, "
               "any, all-with-x, or any-with-x")),
        (lambda ch: ch.queue_bind(q, "amq.direct", "k2"), _locked(q)),
        (lambda ch: ch.queue_bind(q, "amq.direct", "k"), _locked(q)),
    ]
    got = [_outcome(other, op) for op, _ in cases]
    assert got == [expected for _, expected in cases]
    # The bindings are all still there: the owner removes them.
    owner.queue_unbind(q, "amq.direct", "k")
    owner.queue_unbind(q, "amq.headers", arguments={"a": 1})


def test_exchange_bind_and_unbind_check_in_rabbitmqs_order(target: Target) -> None:
    """The default exchange at either end is 403 before anything is looked up; the source
    is looked up before the destination; unbinding what is not there is unbind-ok."""
    conn = target.connect()
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    refused = (403, "ACCESS_REFUSED - operation not permitted on the default exchange")
    cases: list[tuple[Callable[[Any], object], object]] = [
        (lambda ch: ch.exchange_bind(missing + "-d", missing + "-s", "k"),
         (404, f"NOT_FOUND - no exchange '{missing}-s' in vhost '/'")),
        (lambda ch: ch.exchange_bind(missing, "amq.direct", "k"),
         (404, f"NOT_FOUND - no exchange '{missing}' in vhost '/'")),
        (lambda ch: ch.exchange_bind(missing, "amq.headers", arguments={"x-match": "bad"}),
         (404, f"NOT_FOUND - no exchange '{missing}' in vhost '/'")),
        (lambda ch: ch.exchange_unbind(missing + "-d", missing + "-s", "k"), "ok"),
        (lambda ch: ch.exchange_bind("amq.direct", "", "k"), refused),
        (lambda ch: ch.exchange_bind("", "amq.direct", "k"), refused),
        (lambda ch: ch.exchange_unbind("", missing, "k"), refused),
        (lambda ch: ch.exchange_unbind(missing, "", "k"), refused),
    ]
    got = [_outcome(conn, op) for op, _ in cases]
    assert got == [expected for _, expected in cases]


_2020 = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)

# (binding argument, header sent, routed on RabbitMQ 3.10.8)
HEADER_MATCHES: list[tuple[Any, Any, bool]] = [
    (ft.SignedInt(1), ft.Long(1), True),  # top-level numbers: any width, any type
    (ft.Byte(1), ft.Long(1), True),
    (ft.Float(1.5), 1.5, True),
    (_2020, ft.Long(1577836800), True),
    ([ft.SignedInt(1), ft.SignedInt(2)], [ft.Long(1), ft.Long(2)], False),  # in an array: no
    ([ft.SignedInt(1), ft.SignedInt(2)], [ft.SignedInt(1), ft.SignedInt(2)], True),
    ([ft.Byte(1)], [ft.Short(1)], False),
    ([ft.Short(1)], [ft.UnsignedShort(1)], False),
    ([ft.SignedInt(1)], [ft.UnsignedInt(1)], False),
    ([ft.Byte(1)], [ft.UnsignedByte(1)], False),
    ([ft.Long(1)], [ft.UnsignedLong(1)], True),  # RabbitMQ reads L as a long
    ([ft.Float(1.5)], [1.5], False),
    (["a"], [bytearray(b"a")], False),
    ([ft.SignedInt(1)], [1.0], False),
    ([_2020], [ft.Long(1577836800)], False),
    ([True], [ft.Byte(1)], False),
    ([[ft.SignedInt(1)]], [[ft.Long(1)]], False),
    ([Decimal("1.0")], [Decimal("1.0")], True),
    ([None], [None], True),
    ([], [], True),
    ({"a": ft.SignedInt(1)}, {"a": ft.Long(1)}, False),  # in a table: no
    ({"a": ft.SignedInt(1)}, {"a": ft.SignedInt(1)}, True),
    ({"a": [ft.SignedInt(1)]}, {"a": [ft.Long(1)]}, False),
    ({"a": "x"}, {"a": bytearray(b"x")}, False),
    ([{"a": ft.SignedInt(1)}], [{"a": ft.Long(1)}], False),
    ({"a": ft.SignedInt(1), "b": ft.SignedInt(2)}, {"b": ft.SignedInt(2), "a": ft.SignedInt(1)},
     False),  # a nested table's keys are compared in wire order
    ({}, {}, True),
]


def test_headers_exchange_compares_arrays_and_tables_with_their_wire_types(
        target: Target) -> None:
    async def run() -> list[bool]:
        conn = await aiormq.connect(target.url)
        try:
            ch = await conn.channel()
            await ch.confirm_delivery()
            routed = []
            for bound, sent, _ in HEADER_MATCHES:
                tag = uuid.uuid4().hex[:8]
                x, q = f"dh-x-{tag}", f"dh-q-{tag}"
                await ch.exchange_declare(x, exchange_type="headers", auto_delete=True)
                await ch.queue_declare(q, exclusive=True)
                await ch.queue_bind(q, x, arguments={"x-match": "all", "k": bound})
                await ch.basic_publish(  # confirmed: routed or not, it is decided by now
                    b"m", exchange=x, properties=commands.Basic.Properties(headers={"k": sent}))
                routed.append(bool((await ch.queue_declare(q, passive=True)).message_count))
                await ch.queue_delete(q)
            return routed
        finally:
            await conn.close()

    assert asyncio.run(run()) == [expected for _, _, expected in HEADER_MATCHES]


# (binding argument as JSON, header sent, routed on RabbitMQ 3.10.8)
HTTP_HEADER_MATCHES: list[tuple[Any, Any, bool]] = [
    ([1], [ft.Long(1)], True),  # a JSON integer is a long
    ([1], [ft.SignedInt(1)], False),
    ({"a": 1}, {"a": ft.Long(1)}, True),
    ([1.5], [1.5], True),  # a JSON float is a double
    (["x"], ["x"], True),
    ([True], [True], True),
]


def test_headers_binding_made_over_http_has_rabbitmqs_json_types(
        target: Target, request: pytest.FixtureRequest) -> None:
    http = request.getfixturevalue("api" if target.name == "leveret" else "rabbitmq_http")

    async def run() -> list[bool]:
        conn = await aiormq.connect(target.url)
        try:
            ch = await conn.channel()
            await ch.confirm_delivery()
            routed = []
            for bound, sent, _ in HTTP_HEADER_MATCHES:
                tag = uuid.uuid4().hex[:8]
                x, q = f"dh-hx-{tag}", f"dh-hq-{tag}"
                await ch.exchange_declare(x, exchange_type="headers", auto_delete=True)
                await ch.queue_declare(q, auto_delete=True)
                status, _, body = http.post(f"/bindings/%2F/e/{x}/q/{q}", {
                    "routing_key": "", "arguments": {"x-match": "all", "k": bound}})
                assert status == 201, body
                await ch.basic_publish(
                    b"m", exchange=x, properties=commands.Basic.Properties(headers={"k": sent}))
                routed.append(bool((await ch.queue_declare(q, passive=True)).message_count))
                await ch.queue_delete(q)
            return routed
        finally:
            await conn.close()

    assert asyncio.run(run()) == [expected for _, _, expected in HTTP_HEADER_MATCHES]


def _type_error(type_name: str, value: str) -> str:
    return (f"PRECONDITION_FAILED - Invalid x-match field type {type_name} (value {value}); "
            "expected longstr")


# (x-match value, RabbitMQ 3.10.8's reply text)
X_MATCH_TEXTS: list[tuple[Any, str]] = [
    (ft.SignedInt(1), _type_error("signedint", "1")),
    (ft.Long(-5), _type_error("long", "-5")),
    (ft.Byte(1), _type_error("byte", "1")),
    (ft.UnsignedByte(200), _type_error("unsignedbyte", "200")),
    (ft.Short(3), _type_error("short", "3")),
    (ft.UnsignedShort(4), _type_error("unsignedshort", "4")),
    (ft.UnsignedInt(5), _type_error("unsignedint", "5")),
    (True, _type_error("bool", "true")),
    (1.5, _type_error("double", "1.5")),
    (1e20, _type_error("double", "1.0e20")),
    (100000.0, _type_error("double", "1.0e5")),
    (0.00012, _type_error("double", "1.2e-4")),
    (12345678901234567.0, _type_error("double", "1.2345678901234568e16")),
    (ft.Float(0.1), _type_error("float", "0.10000000149011612")),
    (None, _type_error("void", "undefined")),
    (_2020, _type_error("timestamp", "1577836800")),
    (Decimal("1.50"), _type_error("decimal", "{2,150}")),
    (Decimal("-3"), _type_error("decimal", "{0,4294967293}")),
    (bytearray(b"ab\x00"), _type_error("binary", "<<97,98,0>>")),
    ([], _type_error("array", "[]")),
    ([ft.Long(1), "s"], _type_error("array", '[{long,1},{longstr,<<"s">>}]')),
    ([[ft.Byte(1)]], _type_error("array", "[{array,[{byte,1}]}]")),
    ({}, _type_error("table", "[]")),
    # ~p breaks what does not fit in 80 columns, aligned after the bracket ...
    ({"a": ft.SignedInt(1), "b": "x"}, _type_error(
        "table", '[{<<"a">>,signedint,1},\n' + " " * 41 + '{<<"b">>,longstr,<<"x">>}]')),
    ({"n": {"m": None}}, _type_error(
        "table", '[{<<"n">>,table,\n' + " " * 42 + '[{<<"m">>,void,undefined}]}]')),
    # ... and a reply text past 255 bytes is cut to 252 and "...".
    ([ft.Long(1)] * 12, "PRECONDITION_FAILED - Invalid x-match field type array (value "
     "[{long,1},\n" + (" " * 41 + "{long,1},\n") * 3 + " " * 26 + "..."),
    ("all ", "PRECONDITION_FAILED - Invalid x-match field value <<\"all \">>; expected all, any, "
     "all-with-x, or any-with-x"),
]


def test_x_match_of_the_wrong_type_is_refused_with_rabbitmqs_text(target: Target) -> None:
    async def run() -> list[str]:
        conn = await aiormq.connect(target.url)
        try:
            texts = []
            for value, _ in X_MATCH_TEXTS:
                ch = await conn.channel()
                q = f"dh-xm-{uuid.uuid4().hex[:8]}"
                await ch.queue_declare(q, exclusive=True)
                try:
                    await ch.queue_bind(q, "amq.headers", arguments={"x-match": value})
                except aiormq.exceptions.ChannelPreconditionFailed as exc:
                    texts.append(str(exc.args[0]))
                else:
                    texts.append("bound")
            return texts
        finally:
            await conn.close()

    assert asyncio.run(run()) == [text for _, text in X_MATCH_TEXTS]
