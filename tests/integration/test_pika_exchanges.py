"""Exchanges through pika: routing by type, amq.* exchanges, exchange-to-exchange
bindings, alternate exchanges, exchange.delete if-unused and auto-delete.

Every test asserts only on what a client sees (declare-ok counts, get bodies,
channel.close codes and texts), as RabbitMQ 3.10 shows them.
"""

from __future__ import annotations

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker


def publish_keys(ch, exchange: str, keys: list[str]) -> None:
    for key in keys:
        ch.basic_publish(exchange, key, key.encode())


def bodies(helpers, ch, queue: str) -> list[str]:
    return [b.decode() for b in helpers.get_all(ch, queue)]


def declare_queues(ch, base: str, n: int) -> list[str]:
    names = [f"{base}-q{i}" for i in range(n)]
    for name in names:
        ch.queue_declare(name, exclusive=True)
    return names


def test_direct_routes_by_exact_key(amqp, helpers, qname):
    ch = amqp.channel()
    ch.exchange_declare(qname, "direct", auto_delete=True)
    q0, q1, q2 = declare_queues(ch, qname, 3)
    ch.queue_bind(q0, qname, "a")
    ch.queue_bind(q1, qname, "b")
    ch.queue_bind(q2, qname, "a")
    ch.queue_bind(q2, qname, "b")
    ch.queue_bind(q2, qname, "b")  # binding twice is idempotent: still one copy
    publish_keys(ch, qname, ["a", "b", "c", "A", "a.b", ""])
    assert bodies(helpers, ch, q0) == ["a"]
    assert bodies(helpers, ch, q1) == ["b"]
    assert bodies(helpers, ch, q2) == ["a", "b"]


def test_fanout_ignores_routing_key(amqp, helpers, qname):
    ch = amqp.channel()
    ch.exchange_declare(qname, "fanout", auto_delete=True)
    q0, q1 = declare_queues(ch, qname, 2)
    ch.queue_bind(q0, qname, "")
    ch.queue_bind(q1, qname, "whatever")
    publish_keys(ch, qname, ["x", "", "y.z"])
    assert bodies(helpers, ch, q0) == ["x", "", "y.z"]
    assert bodies(helpers, ch, q1) == ["x", "", "y.z"]


TOPIC_KEYS = [
    "quick.orange.rabbit", "lazy.orange.elephant", "quick.orange.fox", "lazy.brown.fox",
    "lazy.pink.rabbit", "quick.brown.fox", "orange", "quick.orange.male.rabbit",
    "lazy.orange.male.rabbit", "lazy", "a.b.c", "a.b", "a.x.y.b", "", "a..b",
]
TOPIC_CASES = {
    "*.orange.*": ["quick.orange.rabbit", "lazy.orange.elephant", "quick.orange.fox"],
    "*.*.rabbit": ["quick.orange.rabbit", "lazy.pink.rabbit"],
    "lazy.#": ["lazy.orange.elephant", "lazy.brown.fox", "lazy.pink.rabbit",
               "lazy.orange.male.rabbit", "lazy"],
    "#": TOPIC_KEYS,
    "a.#.b": ["a.b", "a.x.y.b", "a..b"],
    "a.*": ["a.b"],
    "*": ["orange", "lazy"],  # the empty key has no word for "*" (RabbitMQ 3.10)
    "#.fox": ["quick.orange.fox", "lazy.brown.fox", "quick.brown.fox"],
    "orange": ["orange"],
    "a.*.b": ["a..b"],
    "#.#": TOPIC_KEYS,
}


def test_topic_patterns(amqp, helpers, qname):
    ch = amqp.channel()
    ch.exchange_declare(qname, "topic", auto_delete=True)
    queues = declare_queues(ch, qname, len(TOPIC_CASES))
    for queue, pattern in zip(queues, TOPIC_CASES):
        ch.queue_bind(queue, qname, pattern)
    publish_keys(ch, qname, TOPIC_KEYS)
    got = {pattern: bodies(helpers, ch, queue) for queue, pattern in zip(queues, TOPIC_CASES)}
    assert got == TOPIC_CASES


def test_topic_unbind_one_pattern_keeps_the_other(amqp, helpers, qname):
    ch = amqp.channel()
    ch.exchange_declare(qname, "topic", auto_delete=True)
    (q,) = declare_queues(ch, qname, 1)
    ch.queue_bind(q, qname, "a.*")
    ch.queue_bind(q, qname, "#.b")
    publish_keys(ch, qname, ["a.b"])  # matches both bindings: one copy
    ch.queue_unbind(q, qname, "a.*")
    publish_keys(ch, qname, ["a.c", "x.b"])
    assert bodies(helpers, ch, q) == ["a.b", "x.b"]


HEADERS_CASES = {
    # binding arguments -> which of the messages below it receives
    "all": ({"x-match": "all", "color": "red", "size": 1}, ["red1", "red1x"]),
    "any": ({"x-match": "any", "color": "red", "size": 2}, ["red1", "red1x", "blue2"]),
    "default-is-all": ({"color": "blue"}, ["blue2"]),
    "all-with-x": ({"x-match": "all-with-x", "color": "red", "x-tag": "t"}, ["red1x"]),
    "any-with-x": ({"x-match": "any-with-x", "x-tag": "t"}, ["red1x"]),
    "any-ignores-x": ({"x-match": "any", "x-tag": "t"}, []),
    "empty-all": ({"x-match": "all"}, ["red1", "red1x", "blue2", "none", "str1"]),
}
HEADERS_MESSAGES = {
    "red1": {"color": "red", "size": 1},
    "red1x": {"color": "red", "size": 1, "x-tag": "t"},
    "blue2": {"color": "blue", "size": 2},
    "none": None,
    "str1": {"size": "1"},  # a string "1" is not the integer 1
}


def test_headers_exchange_matching(amqp, helpers, qname):
    ch = amqp.channel()
    ch.exchange_declare(qname, "headers", auto_delete=True)
    queues = declare_queues(ch, qname, len(HEADERS_CASES))
    for queue, (args, _) in zip(queues, HEADERS_CASES.values()):
        ch.queue_bind(queue, qname, "", arguments=args)
    for body, headers in HEADERS_MESSAGES.items():
        ch.basic_publish(qname, "ignored", body.encode(), pika.BasicProperties(headers=headers))
    got = {name: bodies(helpers, ch, queue) for queue, name in zip(queues, HEADERS_CASES)}
    assert got == {name: expected for name, (_, expected) in HEADERS_CASES.items()}


def test_headers_bind_with_bad_x_match_is_406(amqp, qname):
    ch = amqp.channel()
    ch.exchange_declare(qname, "headers", auto_delete=True)
    ch.queue_declare(qname, exclusive=True)
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.queue_bind(qname, qname, "", arguments={"x-match": "some"})
    assert err.value.reply_code == 406


@pytest.mark.parametrize("exchange,kind,key,args", [
    ("amq.direct", "direct", "k", None),
    ("amq.fanout", "fanout", "", None),
    ("amq.topic", "topic", "k.#", None),
    ("amq.headers", "headers", "", {"h": "v"}),
    ("amq.match", "headers", "", {"h": "v"}),
])
def test_predeclared_amq_exchanges_route(amqp, helpers, qname, exchange, kind, key, args):
    ch = amqp.channel()
    ch.exchange_declare(exchange, passive=True)
    # Redeclaring with the same properties is allowed even though the name is reserved.
    ch.exchange_declare(exchange, kind, durable=True)
    ch.queue_declare(qname, exclusive=True)
    ch.queue_bind(qname, exchange, key, arguments=args)
    ch.basic_publish(exchange, "k.x" if kind == "topic" else "k", b"m",
                     pika.BasicProperties(headers={"h": "v"}))
    ch.basic_publish(exchange, "other", b"n", pika.BasicProperties(headers={"h": "w"}))
    expected = [b"m", b"n"] if kind == "fanout" else [b"m"]
    assert helpers.get_all(ch, qname) == expected


def test_default_exchange_routes_by_queue_name_and_cannot_be_bound(amqp, helpers, qname):
    ch = amqp.channel()
    ch.queue_declare(qname, exclusive=True)
    ch.basic_publish("", qname, b"direct")
    assert helpers.get_all(ch, qname) == [b"direct"]
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.queue_bind(qname, "", "other")
    assert err.value.reply_code == 403
    assert err.value.reply_text == (
        "ACCESS_REFUSED - operation not permitted on the default exchange")


def test_amq_prefix_declare_and_delete_are_refused(amqp, qname):
    ch = amqp.channel()
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.exchange_declare("amq.leveret-" + qname, "direct")
    assert err.value.reply_code == 403
    assert err.value.reply_text == (
        f"ACCESS_REFUSED - exchange name 'amq.leveret-{qname}' contains reserved prefix 'amq.*'")
    ch = amqp.channel()
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.exchange_delete("amq.direct")
    assert err.value.reply_code == 403
    ch = amqp.channel()
    ch.exchange_declare("amq.direct", passive=True)  # still there


def test_passive_declare_missing_exchange_is_404(amqp, qname):
    ch = amqp.channel()
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.exchange_declare(qname, passive=True)
    assert err.value.reply_code == 404
    assert err.value.reply_text == f"NOT_FOUND - no exchange '{qname}' in vhost '/'"


def test_exchange_equivalence_is_406(amqp, qname):
    ch = amqp.channel()
    ch.exchange_declare(qname, "direct", auto_delete=True)
    ch.exchange_declare(qname, "direct", auto_delete=True)  # same: fine
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.exchange_declare(qname, "fanout", auto_delete=True)
    assert err.value.reply_code == 406
    assert err.value.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{qname}' in vhost '/': "
        "received 'fanout' but current is 'direct'")
    ch = amqp.channel()
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.exchange_declare(qname, "direct", durable=True, auto_delete=True)
    assert err.value.reply_code == 406
    ch = amqp.channel()
    ch.exchange_delete(qname)


def test_publish_to_missing_exchange_closes_channel_404(amqp, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.basic_publish(qname, "k", b"x")
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.queue_declare("", exclusive=True)
    assert err.value.reply_code == 404
    assert err.value.reply_text == f"NOT_FOUND - no exchange '{qname}' in vhost '/'"
    assert conn.is_open


def test_publish_to_internal_exchange_is_403(amqp, helpers, qname):
    ch = amqp.channel()
    ch.exchange_declare(qname, "fanout", auto_delete=True, internal=True)
    ch.exchange_declare(qname + "-front", "fanout", auto_delete=True)
    ch.exchange_bind(qname, qname + "-front")
    ch.queue_declare(qname, exclusive=True)
    ch.queue_bind(qname, qname)
    ch.basic_publish(qname + "-front", "", b"via-e2e")  # internal exchanges are reachable by E2E
    assert helpers.get_all(ch, qname) == [b"via-e2e"]
    ch.basic_publish(qname, "", b"direct")
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.queue_declare("", exclusive=True)
    assert err.value.reply_code == 403
    assert err.value.reply_text == (
        f"ACCESS_REFUSED - cannot publish to internal exchange '{qname}' in vhost '/'")


# -- exchange-to-exchange bindings -----------------------------------------------------


def test_e2e_binding_routes_through_and_unbind_stops_it(amqp, helpers, qname):
    ch = amqp.channel()
    src, dst = qname + "-src", qname + "-dst"
    ch.exchange_declare(src, "topic")
    ch.exchange_declare(dst, "direct", auto_delete=True)
    ch.queue_declare(qname, exclusive=True)
    ch.queue_bind(qname, dst, "a.b")
    ch.exchange_bind(destination=dst, source=src, routing_key="a.*")
    publish_keys(ch, src, ["a.b", "a.c", "x.b"])  # a.c passes src but not dst
    assert bodies(helpers, ch, qname) == ["a.b"]
    ch.exchange_unbind(destination=dst, source=src, routing_key="a.*")
    publish_keys(ch, src, ["a.b"])
    ch.basic_publish(dst, "a.b", b"a.b direct")
    assert bodies(helpers, ch, qname) == ["a.b direct"]
    ch.exchange_delete(src)


def test_e2e_diamond_and_cycle_deliver_one_copy(amqp, helpers, qname):
    ch = amqp.channel()
    a, b, c, d = (f"{qname}-{x}" for x in "abcd")
    for name in (a, b, c, d):
        ch.exchange_declare(name, "fanout", auto_delete=True)
    ch.exchange_bind(b, a)
    ch.exchange_bind(c, a)
    ch.exchange_bind(d, b)
    ch.exchange_bind(d, c)
    ch.exchange_bind(a, d)  # a cycle back to the start
    ch.queue_declare(qname, exclusive=True)
    ch.queue_bind(qname, d)
    ch.queue_bind(qname, b)
    ch.basic_publish(a, "", b"once")
    ch.basic_publish(d, "", b"from-d")
    assert helpers.get_all(ch, qname) == [b"once", b"from-d"]


def test_e2e_bind_missing_exchange_is_404(amqp, qname):
    ch = amqp.channel()
    ch.exchange_declare(qname, "fanout", auto_delete=True)
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.exchange_bind(qname, qname + "-missing")
    assert err.value.reply_code == 404
    assert err.value.reply_text == f"NOT_FOUND - no exchange '{qname}-missing' in vhost '/'"


# -- alternate exchanges -----------------------------------------------------------------


def test_alternate_exchange_gets_unroutable_messages(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ae, main = qname + "-ae", qname + "-main"
    ch.exchange_declare(ae, "fanout", auto_delete=True)
    ch.exchange_declare(main, "direct", auto_delete=True, arguments={"alternate-exchange": ae})
    ch.queue_declare(qname + "-routed", exclusive=True)
    ch.queue_declare(qname + "-unrouted", exclusive=True)
    ch.queue_bind(qname + "-routed", main, "known")
    ch.queue_bind(qname + "-unrouted", ae)
    returned = []
    ch.add_on_return_callback(lambda *args: returned.append(args))
    ch.basic_publish(main, "known", b"r1", mandatory=True)
    ch.basic_publish(main, "unknown", b"u1", mandatory=True)
    ch.basic_publish(main, "other", b"u2")
    helpers.settle(conn)
    assert returned == []  # routed via the AE counts as routed for mandatory
    assert helpers.get_all(ch, qname + "-routed") == [b"r1"]
    assert helpers.get_all(ch, qname + "-unrouted") == [b"u1", b"u2"]


def test_missing_alternate_exchange_means_unroutable(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.exchange_declare(qname, "direct", auto_delete=True,
                        arguments={"alternate-exchange": qname + "-nowhere"})
    ch.queue_declare(qname, exclusive=True)
    ch.queue_bind(qname, qname, "k")
    returned = []
    ch.add_on_return_callback(lambda _ch, method, _p, body: returned.append((method, body)))
    ch.basic_publish(qname, "other", b"lost", mandatory=True)
    assert helpers.poll(conn, lambda: returned)
    assert returned[0][0].reply_code == 312
    assert returned[0][1] == b"lost"


# -- delete and auto-delete ------------------------------------------------------------


def test_exchange_delete_if_unused(amqp, qname):
    ch = amqp.channel()
    ch.exchange_declare(qname, "direct")
    ch.queue_declare(qname, exclusive=True)
    ch.queue_bind(qname, qname, "k")
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.exchange_delete(qname, if_unused=True)
    assert err.value.reply_code == 406
    assert err.value.reply_text == f"PRECONDITION_FAILED - exchange '{qname}' in vhost '/' in use"
    ch = ch.connection.channel()
    ch.exchange_declare(qname, passive=True)  # the failed delete left it alone
    ch.queue_unbind(qname, qname, "k")
    ch.exchange_delete(qname, if_unused=True)
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.exchange_declare(qname, passive=True)
    assert err.value.reply_code == 404


def test_exchange_delete_is_idempotent_and_removes_bindings(amqp, helpers, qname):
    ch = amqp.channel()
    ch.exchange_delete(qname + "-never-declared")  # no 404: delete is an assertion
    ch.exchange_declare(qname, "fanout")
    ch.queue_declare(qname, exclusive=True)
    ch.queue_bind(qname, qname)
    ch.exchange_delete(qname)
    ch.exchange_declare(qname, "fanout")  # re-created: the old binding must be gone
    ch.basic_publish(qname, "", b"x")
    assert helpers.ready_count(ch, qname) == 0
    ch.exchange_delete(qname)


def test_auto_delete_exchange_goes_with_its_last_binding(amqp, qname):
    ch = amqp.channel()
    ch.exchange_declare(qname, "direct", auto_delete=True)
    ch.exchange_declare(qname, passive=True)  # never bound: stays
    ch.queue_declare(qname, exclusive=True)
    ch.queue_bind(qname, qname, "a")
    ch.queue_bind(qname, qname, "b")
    ch.queue_unbind(qname, qname, "a")
    ch.exchange_declare(qname, passive=True)  # one binding left
    ch.queue_unbind(qname, qname, "b")
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.exchange_declare(qname, passive=True)
    assert err.value.reply_code == 404


def test_auto_delete_exchange_goes_when_its_queue_is_deleted(amqp, qname):
    ch = amqp.channel()
    ch.exchange_declare(qname, "fanout", auto_delete=True)
    ch.queue_declare(qname)
    ch.queue_bind(qname, qname)
    ch.queue_delete(qname)
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.exchange_declare(qname, passive=True)
    assert err.value.reply_code == 404


def test_auto_delete_exchange_as_e2e_source_and_destination(amqp, qname):
    """Only source-side bindings count: losing its upstream binding keeps the exchange."""
    ch = amqp.channel()
    up, mid = qname + "-up", qname + "-mid"
    ch.exchange_declare(up, "fanout")
    ch.exchange_declare(mid, "fanout", auto_delete=True)
    ch.queue_declare(qname, exclusive=True)
    ch.queue_bind(qname, mid)
    ch.exchange_bind(mid, up)
    ch.exchange_unbind(mid, up)
    ch.exchange_declare(mid, passive=True)
    ch.queue_unbind(qname, mid)
    with pytest.raises(ChannelClosedByBroker):
        ch.exchange_declare(mid, passive=True)
    ch = amqp.channel()
    ch.exchange_delete(up)


def test_delete_if_unused_counts_only_source_bindings(amqp, helpers, qname):
    """Being the destination of an E2E binding does not make an exchange "in use"."""
    ch = amqp.channel()
    src, dst = qname + "-src", qname + "-dst"
    ch.exchange_declare(src, "fanout")
    ch.exchange_declare(dst, "fanout")
    ch.exchange_bind(dst, src)
    ch.exchange_delete(dst, if_unused=True)
    with pytest.raises(ChannelClosedByBroker):
        ch.exchange_declare(dst, passive=True)
    ch = amqp.channel()
    ch.exchange_delete(src, if_unused=True)  # its only binding went with dst
    with pytest.raises(ChannelClosedByBroker):
        ch.exchange_declare(src, passive=True)


def test_auto_delete_source_goes_when_its_e2e_destination_is_deleted(amqp, qname):
    ch = amqp.channel()
    src, dst = qname + "-src", qname + "-dst"
    ch.exchange_declare(src, "fanout", auto_delete=True)
    ch.exchange_declare(dst, "fanout")
    ch.exchange_bind(dst, src)
    ch.exchange_delete(dst)
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.exchange_declare(src, passive=True)
    assert err.value.reply_code == 404
