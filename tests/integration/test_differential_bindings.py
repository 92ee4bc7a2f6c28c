"""Bindings as RabbitMQ 3.10.8 makes them, the same program on both brokers.

Each test runs against the ``target`` fixture: Leveret, and the real RabbitMQ on
127.0.0.1:5672 when one runs (skipped otherwise), so a RabbitMQ run proves the
expectation. Covered here:

* queue.bind / queue.unbind against another connection's exclusive queue: which check
  answers first (403, 404, 406, 405), and an unbind of nothing being unbind-ok;
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pika

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
