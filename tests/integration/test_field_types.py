"""Field-table types survive the broker, as in RabbitMQ (against both brokers).

The client here is aiormq (pamqp) with Leveret's typed table codec installed in
this process, so the test sends each value in the wire type it names and sees
the type each value comes back in: a header sent as a signed int (``I``) must
not come back as a byte after dead-lettering, and ``x-death``'s ``count`` is a
long, as RabbitMQ writes it.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import aiormq
import pytest
from pamqp import commands

from leveret.model import field_table as ft

ft.install()  # what this process's pamqp decodes now keeps wire types too

HEADERS = {
    "signed": ft.SignedInt(5), "long": ft.Long(7), "byte": ft.Byte(1), "short": ft.Short(2),
    "ushort": ft.UnsignedShort(3), "float": ft.Float(1.5), "double": 2.5, "text": "x",
    "flag": True, "nested": {"inner": ft.SignedInt(1), "list": [ft.Long(2), ft.Short(3)]},
}


def typed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (ft.type_name(value), value)


async def _dead_letter_round_trip(url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    conn = await aiormq.connect(url)
    try:
        ch = await conn.channel()
        tag = uuid.uuid4().hex[:8]
        dlq, src = f"ft-dlq-{tag}", f"ft-src-{tag}"
        await ch.queue_declare(dlq, auto_delete=False)
        await ch.queue_declare(src, arguments={"x-dead-letter-exchange": "",
                                               "x-dead-letter-routing-key": dlq})
        await ch.basic_publish(b"m", routing_key=src,
                               properties=commands.Basic.Properties(headers=dict(HEADERS)))
        for _ in range(6000):  # until it is there (a 60 s hang guard)
            got = await ch.basic_get(src)
            if got.delivery_tag is not None:
                break
            await asyncio.sleep(0.01)
        direct = dict(got.header.properties.headers or {})
        await ch.basic_reject(got.delivery_tag, requeue=False)
        for _ in range(6000):  # until it is there (a 60 s hang guard)
            dead = await ch.basic_get(dlq, no_ack=True)
            if dead.delivery_tag is not None:
                break
            await asyncio.sleep(0.01)
        lettered = dict(dead.header.properties.headers or {})
        await ch.queue_delete(src)
        await ch.queue_delete(dlq)
        return direct, lettered
    finally:
        await conn.close()


def test_header_types_survive_delivery_and_dead_lettering(target: Any) -> None:
    direct, lettered = asyncio.run(_dead_letter_round_trip(target.url))
    assert typed(direct) == typed(HEADERS)
    assert typed({k: lettered[k] for k in HEADERS}) == typed(HEADERS)
    (death,) = lettered["x-death"]
    assert ft.type_name(death["count"]) == "long" and death["count"] == 1
    assert ft.type_name(death["time"]) == "timestamp"
    assert [ft.type_name(k) for k in death["routing-keys"]] == ["longstr"]


@pytest.mark.parametrize(("value", "type_name"), [(ft.SignedInt(5), "signedint"),
                                                   (True, "bool"), (ft.Long(5), "long")])
def test_alternate_exchange_of_the_wrong_type_names_the_wire_type(
        target: Any, value: Any, type_name: str) -> None:
    async def declare() -> str:
        conn = await aiormq.connect(target.url)
        try:
            ch = await conn.channel()
            name = f"ft-ae-{uuid.uuid4().hex[:8]}"
            try:
                await ch.exchange_declare(name, exchange_type="direct",
                                          arguments={"alternate-exchange": value})
            except aiormq.exceptions.ChannelPreconditionFailed as exc:
                return str(exc.args[0])
            await ch.exchange_delete(name)
            return "declared"
        finally:
            await conn.close()

    text = asyncio.run(declare())
    assert text.startswith(f"PRECONDITION_FAILED - invalid type '{type_name}' for arg "
                           "'alternate-exchange' in exchange 'ft-ae-"), text
    assert text.endswith("' in vhost '/'"), text


@pytest.mark.parametrize(("bound", "sent", "routed"), [
    (ft.SignedInt(1), ft.Long(1), True),     # integer widths are compatible in RabbitMQ 3.10
    (ft.Byte(1), ft.SignedInt(1), True),
    (ft.Float(1.5), 1.5, True),              # float and double too
    ("a", bytearray(b"a"), True),            # longstr and byte array compare as binaries
    (True, ft.Byte(1), False),               # but a bool is not a number
])
def test_headers_exchange_matches_values_as_rabbitmq(target: Any, bound: Any, sent: Any,
                                                     routed: bool) -> None:
    async def run() -> int:
        conn = await aiormq.connect(target.url)
        try:
            ch = await conn.channel()
            tag = uuid.uuid4().hex[:8]
            x, q = f"ft-hx-{tag}", f"ft-hq-{tag}"
            await ch.exchange_declare(x, exchange_type="headers")
            await ch.queue_declare(q)
            await ch.queue_bind(q, x, arguments={"x-match": "all", "k": bound})
            await ch.confirm_delivery()
            await ch.basic_publish(b"m", exchange=x,
                                   properties=commands.Basic.Properties(headers={"k": sent}))
            count = (await ch.queue_declare(q, passive=True)).message_count or 0
            await ch.queue_delete(q)
            await ch.exchange_delete(x)
            return count
        finally:
            await conn.close()

    assert asyncio.run(run()) == (1 if routed else 0)


def test_rabbitmqs_trace_exchange_is_predeclared_and_internal(target: Any) -> None:
    async def run() -> str:
        conn = await aiormq.connect(target.url)
        try:
            ch = await conn.channel()
            await ch.exchange_declare("amq.rabbitmq.trace", passive=True)
            try:
                await ch.basic_publish(b"m", exchange="amq.rabbitmq.trace", routing_key="x")
                await ch.queue_declare("ft-after-trace-publish")
            except aiormq.exceptions.ChannelAccessRefused as exc:
                return str(exc.args[0])
            return "published"
        finally:
            await conn.close()

    assert asyncio.run(run()) == ("ACCESS_REFUSED - cannot publish to internal exchange "
                                  "'amq.rabbitmq.trace' in vhost '/'")
