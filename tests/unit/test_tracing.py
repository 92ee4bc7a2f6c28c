"""The trace ring (``queues/tracing.py``) with plain values: records read back as the API's
events in order, the ring is capped and counts what it evicts, the queue filter applies to
every kind of record, and subscribers see events as they are recorded."""

from __future__ import annotations

import pytest
from pamqp import commands

from leveret.model.message import Message
from leveret.model.properties import encode_properties
from leveret.queues import tracing
from leveret.queues.tracing import Tracer


def _message(mid: str, rk: str = "q") -> Message:
    props = encode_properties(commands.Basic.Properties(message_id=mid))
    return Message("x", rk, props, b"body")


def test_a_life_reads_back_in_order() -> None:
    t = Tracer(100)
    m = _message("m1")
    t.published(m, ["q"], "guest", 1, False, True)
    t.delivered("q", m, "ctag", False, 1, "guest", True)
    t.settled("reject", "q", m, 1, "ctag", False)
    tracing.dropped(t, "q", m, "rejected", "dlx")
    events = t.events_of("m1")
    assert [e["event"] for e in events] == ["publish", "route", "enqueue", "deliver", "reject",
                                            "dead-letter"]
    assert events[0] | {"timestamp": 0} == {
        "event": "publish", "timestamp": 0, "message_id": "m1", "exchange": "x",
        "routing_key": "q", "user": "guest", "channel": 1, "mandatory": False, "confirm": True}
    assert events[1]["queues"] == ["q"] and events[2]["queue"] == "q"
    assert events[4]["requeue"] is False and events[5]["dead_letter_exchange"] == "dlx"


def test_auto_ack_and_unroutable_mandatory_expand() -> None:
    t = Tracer(10)
    m = _message("m2")
    t.delivered("q", m, "c", True, 2, None, False)
    t.published(_message("m3"), [], "u", 1, True, False)
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
    t.published(m, ["other"], "u", 1, False, False)
    t.delivered("other", m, "c", False, 1, "u", True)
    t.settled("ack", "other", m, 1, "c", None)
    tracing.dropped(t, "other", m, "expired", None)
    assert list(t.events()) == []
    t.published(m, ["other", "keep-1"], "u", 1, False, False)
    enqueued = [e["queue"] for e in t.events() if e["event"] == "enqueue"]
    assert enqueued == ["keep-1"]


def test_subscribers_get_events_as_recorded() -> None:
    t = Tracer(10)
    seen: list[str] = []
    t.subscribers.append(lambda e: seen.append(e["event"]))
    t.published(_message("m"), ["q"], "u", 1, False, False)
    assert seen == ["publish", "route", "enqueue"]


@pytest.mark.parametrize("capacity, queue", [(0, None), (tracing.MAX_CAPACITY + 1, None),
                                             (10, "(")])
def test_bad_settings_are_value_errors(capacity: int, queue: str | None) -> None:
    with pytest.raises(ValueError):
        Tracer(capacity, queue)
