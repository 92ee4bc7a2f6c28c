"""The trace ring (``queues/tracing.py``) with plain values: records read back as the API's
events in order, the ring is capped and counts what it evicts, the queue filter applies to
every kind of record, and subscribers see events as they are recorded."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pamqp import commands

from leveret.management_ui.sse import ring_slice
from leveret.model.message import Message
from leveret.model.properties import encode_properties
from leveret.queues import tracing
from leveret.queues.tracing import Tracer


def _message(mid: str, rk: str = "q") -> Message:
    props = encode_properties(commands.Basic.Properties(message_id=mid))
    return Message("x", rk, props, b"body")


def _queues(*names: str) -> tuple[SimpleNamespace, ...]:
    """Stand-ins for the queues a publish reached: the tracer reads their names."""
    return tuple(SimpleNamespace(name=n) for n in names)


def test_a_life_reads_back_in_order() -> None:
    t = Tracer(100)
    m = _message("m1")
    t.published(m, _queues("q"), "guest", 1, False, True)
    t.delivered("q", m, "ctag", False, 1, "guest", True)
    t.settled("reject", "q", m, 1, "ctag", False)
    tracing.dropped(t, "q", m, "rejected", "dlx")
    events = t.events_of("m1")
    assert [e["event"] for e in events] == ["publish", "route", "enqueue", "deliver", "reject",
                                            "dead-letter"]
    assert events[0] | {"timestamp": 0} == {
        "event": "publish", "timestamp": 0, "message_id": "m1", "exchange": "x",
        "routing_key": "q", "user": "guest", "channel": 1, "mandatory": False, "confirm": True,
        "via": "amqp"}
    assert events[1]["queues"] == ["q"] and events[2]["queue"] == "q"
    assert events[1]["exchanges"] == [{"name": "x", "via": "published"}]
    assert events[1]["bindings"] == [{"source": "x", "destination": "q",
                                      "destination_type": "queue"}]
    assert events[4]["requeue"] is False and events[5]["dead_letter_exchange"] == "dlx"


def test_auto_ack_and_unroutable_mandatory_expand() -> None:
    t = Tracer(10)
    m = _message("m2")
    t.delivered("q", m, "c", True, 2, None, False)
    t.published(_message("m3"), (), "u", 1, True, False)
    assert [(e["event"], e.get("auto")) for e in t.events_of("m2")] == [
        ("deliver", None), ("ack", True)]
    assert [e["event"] for e in t.events_of("m3")] == ["publish", "route", "return"]
    t.settled("ack", "q", m, 2, "c", None)
    assert "requeue" not in t.events_of("m2")[-1]


def test_the_ring_is_capped_and_counts_evictions() -> None:
    t = Tracer(3)
    for i in range(5):
        t.settled("ack", "q", _message(f"m{i}"), 1, "c", None)
    assert [e["message_id"] for e in t.events()] == ["m2", "m3", "m4"]
    assert t.describe()["records"] == 3 and t.evicted == 2


def test_the_queue_filter_applies_to_every_record() -> None:
    t = Tracer(10, "^keep")
    m = _message("m")
    t.published(m, _queues("other"), "u", 1, False, False)
    t.delivered("other", m, "c", False, 1, "u", True)
    t.settled("ack", "other", m, 1, "c", None)
    tracing.dropped(t, "other", m, "expired", None)
    assert list(t.events()) == []
    t.published(m, _queues("other", "keep-1"), "u", 1, False, False)
    enqueued = [e["queue"] for e in t.events() if e["event"] == "enqueue"]
    assert enqueued == ["keep-1"]


def test_readers_read_the_ring_from_their_position() -> None:
    """A live reader (the SSE stream) reads what was kept after its position, and learns how
    many the ring let go before it read them; recording does nothing for it."""
    t = Tracer(3)
    start = t.appended
    t.published(_message("m"), _queues("q"), "u", 1, False, False)
    records, dropped, position = ring_slice(t.ring, t.appended, start)
    assert [e["event"] for r in records for e in tracing.expand(r, {})] == [
        "publish", "route", "enqueue"]
    assert (dropped, position) == (0, 1)
    for i in range(5):
        t.settled("ack", "q", _message(f"a{i}"), 1, "c", None)
    records, dropped, position = ring_slice(t.ring, t.appended, position)
    assert [r[3] for r in records] == [_message(f"a{i}").raw_properties for i in (2, 3, 4)]
    assert (dropped, position, t.evicted) == (2, 6, 3)


@pytest.mark.parametrize("capacity, queue", [(0, None), (tracing.MAX_CAPACITY + 1, None),
                                             (10, "(")])
def test_bad_settings_are_value_errors(capacity: int, queue: str | None) -> None:
    with pytest.raises(ValueError):
        Tracer(capacity, queue)


def test_route_details_show_the_exchange_chain_and_the_alternate_exchange() -> None:
    t = Tracer(10)
    steps = (("x", "published", ()), ("ae", "alternate-exchange", (("exchange", "x2"),)),
             ("x2", "exchange-binding", (("queue", "q"),)))
    t.published(_message("m"), _queues("q"), "u", 1, False, False, steps)
    route = t.events_of("m")[1]
    assert route["exchanges"] == [{"name": "x", "via": "published"},
                                  {"name": "ae", "via": "alternate-exchange"},
                                  {"name": "x2", "via": "exchange-binding"}]
    assert route["alternate_exchange"] == "ae" and route["unroutable"] is False
    assert [(b["source"], b["destination"]) for b in route["bindings"]] == [("ae", "x2"),
                                                                           ("x2", "q")]
    t.published(_message("lost"), (), "u", 1, False, False, (("x", "published", ()),))
    lost = t.events_of("lost")
    assert [e["event"] for e in lost] == ["publish", "route"]  # not mandatory: no return
    assert lost[1]["unroutable"] is True and lost[1]["bindings"] == []


def test_http_publish_and_requeue_on_close_read_back() -> None:
    t = Tracer(10)
    m = _message("h")
    t.published(m, _queues("q"), "admin", None, False, False)
    t.requeued("q", m, 3, "ctag", "channel closed")
    publish, *_, requeue = t.events_of("h")
    assert publish["via"] == "http" and publish["channel"] is None
    assert requeue | {"timestamp": 0} == {
        "event": "nack", "timestamp": 0, "message_id": "h", "exchange": "x", "routing_key": "q",
        "queue": "q", "channel": 3, "consumer_tag": "ctag", "reason": "channel closed",
        "requeue": True}


def test_evictions_are_counted_with_a_filter_and_without() -> None:
    """The ring's eviction count (and ``appended``, what readers go by) holds whichever way a
    record is kept: plain appends, or the queue filter turning records away."""
    t = Tracer(2, "^keep")
    for i in range(3):
        t.settled("ack", "keep", _message(f"k{i}"), 1, "c", None)
        t.settled("ack", "other", _message(f"o{i}"), 1, "c", None)
    assert [e["message_id"] for e in t.events()] == ["k1", "k2"] and t.evicted == 1
    assert t.appended == 3
    plain = Tracer(2)
    assert plain.record == plain.ring.append  # no filter: the C append, readers or not
    for name in "abc":
        plain.settled("ack", "q", _message(name), 1, "c", None)
    assert (plain.evicted, plain.appended) == (1, 3)


def test_queue_filter_is_matched_in_linear_time() -> None:
    """The filter is tested on every traced step: a backtracking engine would take 2**100
    steps on this queue's name for ``^(a+)+$``; RE2 answers at once."""
    t = Tracer(10, "^(a+)+$")
    t.settled("ack", "a" * 100 + "!", _message("no"), 1, "c", None)
    t.settled("ack", "aaaa", _message("yes"), 1, "c", None)
    assert [e["message_id"] for e in t.events()] == ["yes"]
    assert t.describe()["queue"] == "^(a+)+$"
    with pytest.raises(ValueError):
        Tracer(10, "(?=a)")  # no lookaround in RE2


def test_a_dead_lettered_copy_is_followed_into_the_next_queue() -> None:
    t = Tracer(100)
    m = _message("m2")
    t.published(m, _queues("work"), "guest", 1, False, False)
    tracing.dropped(t, "work", m, "expired", "dlx")
    dead = Message("dlx", "failed", m.raw_properties, b"body")
    steps = (("dlx", "published", (("queue", "parking"),)),)
    t.dead_lettered(dead, _queues("parking"), "work", "expired", steps)
    events = t.events_of("m2")
    assert [e["event"] for e in events] == ["publish", "route", "enqueue", "expire",
                                            "dead-letter", "route", "enqueue"]
    route, enqueue = events[-2:]
    assert route["dead_lettered_from"] == "work" and route["reason"] == "expired"
    assert route["exchange"] == "dlx" and route["routing_key"] == "failed"
    assert route["exchanges"] == [{"name": "dlx", "via": "published"}]
    assert enqueue == {**enqueue, "queue": "parking", "dead_lettered_from": "work"}
    # A filter on either queue keeps the copy's route; on neither, drops it.
    for pattern, kept in (("^work$", True), ("^parking$", True), ("^other$", False)):
        f = Tracer(100, pattern)
        f.dead_lettered(dead, _queues("parking"), "work", "expired", steps)
        assert bool(list(f.events())) is kept, pattern
