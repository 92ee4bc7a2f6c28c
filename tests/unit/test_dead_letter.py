"""x-death construction, cycle detection and dead-lettering between queues."""

from __future__ import annotations

import datetime

from leveret.model.properties import decode_properties
from leveret.queues.dead_letter import is_cycle, make_message, update_x_death

from .queue_fakes import FakeClock, FakeVhost, msg

T1 = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
T2 = datetime.datetime(2024, 1, 2, tzinfo=datetime.UTC)


def test_first_death() -> None:
    h = update_x_death({"a": 1}, "q", "rejected", "ex", ["rk", "cc"], T1, "500")
    assert h["a"] == 1
    assert h["x-death"] == [{"count": 1, "reason": "rejected", "queue": "q", "time": T1,
                             "exchange": "ex", "routing-keys": ["rk", "cc"],
                             "original-expiration": "500"}]
    assert (h["x-first-death-queue"], h["x-first-death-reason"], h["x-first-death-exchange"]) \
        == ("q", "rejected", "ex")
    assert (h["x-last-death-queue"], h["x-last-death-reason"]) == ("q", "rejected")


def test_repeated_death_counts_and_moves_to_front_keeping_first_details() -> None:
    h = update_x_death(None, "q1", "rejected", "ex1", ["a"], T1)
    h = update_x_death(h, "q2", "expired", "ex2", ["b"], T2)
    assert [(d["queue"], d["reason"], d["count"]) for d in h["x-death"]] == [
        ("q2", "expired", 1), ("q1", "rejected", 1)]
    h = update_x_death(h, "q1", "rejected", "ex3", ["c"], T2)
    deaths = h["x-death"]
    assert [(d["queue"], d["reason"], d["count"]) for d in deaths] == [
        ("q1", "rejected", 2), ("q2", "expired", 1)]
    assert deaths[0]["time"] == T1 and deaths[0]["routing-keys"] == ["a"]
    assert h["x-first-death-queue"] == "q1" and h["x-first-death-exchange"] == "ex1"
    assert h["x-last-death-exchange"] == "ex3"
    # Same queue, another reason: a separate entry.
    h = update_x_death(h, "q1", "maxlen", "ex1", ["a"], T2)
    assert (h["x-death"][0]["queue"], h["x-death"][0]["reason"]) == ("q1", "maxlen")
    assert len(h["x-death"]) == 3


def test_input_headers_are_not_mutated() -> None:
    original = {"x-death": [{"queue": "q", "reason": "expired", "count": 1}]}
    update_x_death(original, "q", "expired", "", ["q"], T1)
    assert original["x-death"][0]["count"] == 1


def test_cycle_detection() -> None:
    expired_in_a = [{"queue": "a", "reason": "expired"}]
    assert is_cycle("a", expired_in_a)
    assert not is_cycle("b", expired_in_a)
    through_reject = [{"queue": "b", "reason": "expired"}, {"queue": "a", "reason": "rejected"}]
    assert not is_cycle("a", through_reject)
    automatic = [{"queue": "b", "reason": "expired"}, {"queue": "a", "reason": "maxlen"}]
    assert is_cycle("a", automatic)
    assert not is_cycle("a", None)


def test_make_message_strips_expiration_and_cc_with_dlrk() -> None:
    m = msg(b"body", expiration="100", headers={"CC": ["c1"]}, persistent=True)
    dead, keys, _ = make_message(m, "q", "expired", "dlx", "new-rk", T1)
    props = decode_properties(dead.raw_properties)
    assert dead.body == b"body" and dead.exchange == "dlx" and dead.routing_key == "new-rk"
    assert keys == ["new-rk"] and props.expiration is None and props.delivery_mode == 2
    assert "CC" not in props.headers
    death = props.headers["x-death"][0]
    assert death["routing-keys"] == ["rk", "c1"] and death["original-expiration"] == "100"
    dead, keys, _ = make_message(m, "q", "expired", "dlx", None, T1)
    assert keys == ["rk", "c1"]
    assert decode_properties(dead.raw_properties).headers["CC"] == ["c1"]


def test_dead_letter_through_the_default_exchange_and_cycle_drop() -> None:
    clock = FakeClock()
    vhost = FakeVhost(clock)
    from leveret.exchanges import Exchange

    vhost.exchanges[""] = Exchange("", "direct", durable=True, vhost="/")
    dlq = vhost.queue("dlq")
    src = vhost.queue("src", **{"x-message-ttl": 10, "x-dead-letter-exchange": "",
                                "x-dead-letter-routing-key": "dlq"})
    src.publish(msg(b"m"))
    clock.advance(0.02)
    assert src.message_count == 0 and dlq.message_count == 1
    entry = dlq.take()
    headers = decode_properties(entry.message.raw_properties).headers
    assert headers["x-death"][0]["reason"] == "expired"
    assert headers["x-death"][0]["time"] == datetime.datetime.fromtimestamp(
        int(clock.wall()), tz=datetime.UTC)  # the injected wall clock, whole seconds
    # A queue dead-lettering expired messages to itself drops them (a cycle).
    loop = vhost.queue("loop", **{"x-message-ttl": 10, "x-dead-letter-exchange": ""})
    loop.publish(msg(b"m"))
    clock.advance(0.05)
    assert loop.message_count == 0


def test_reject_dead_letters_and_missing_dlx_drops() -> None:
    clock = FakeClock()
    vhost = FakeVhost(clock)
    from leveret.exchanges import Exchange

    vhost.exchanges[""] = Exchange("", "direct", durable=True, vhost="/")
    dlq = vhost.queue("dlq")
    q = vhost.queue("q", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
    q.publish(msg(b"m"))
    entry = q.take()
    q.reject(entry)
    assert dlq.message_count == 1 and q.unacked == 0
    q2 = vhost.queue("q2", **{"x-dead-letter-exchange": "missing"})
    q2.publish(msg(b"m"))
    entry = q2.take()
    q2.reject(entry)
    assert q2.message_count == 0


def test_delivery_limit_dead_letters_on_requeue() -> None:
    clock = FakeClock()
    vhost = FakeVhost(clock)
    from leveret.exchanges import Exchange

    vhost.exchanges[""] = Exchange("", "direct", durable=True, vhost="/")
    dlq = vhost.queue("dlq")
    q = vhost.queue("q", **{"x-delivery-limit": 2, "x-dead-letter-exchange": "",
                            "x-dead-letter-routing-key": "dlq"})
    q.publish(msg(b"m"))
    for expected_ready in (1, 1, 0):
        entry = q.take()
        entry.delivery_count += 1
        q.requeue(entry)
        assert q.message_count == expected_ready
    assert dlq.message_count == 1
    headers = decode_properties(dlq.take().message.raw_properties).headers
    assert headers["x-death"][0]["reason"] == "delivery_limit"
