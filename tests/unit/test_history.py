"""Per-object sample rings (management_ui/history.py) and the exchange tally: pure data,
driven round by round with plain values and a fake clock."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from leveret.management_ui import views
from leveret.management_ui.exchange_tally import ExchangeTally
from leveret.management_ui.history import History


def rounds(history: History, key: str, values: list[tuple[int, ...]], start: float = 1000.0,
           step: float = 5.0) -> float:
    t = start
    for v in values:
        history.record(key, v, t)
        history.end_round()
        t += step
    return t - step


def test_rates_are_the_last_two_rounds_per_second() -> None:
    h = History()
    rounds(h, "q", [(0, 0), (10, 100), (30, 100)])
    assert h.rates("q", 2) == [4.0, 0.0]
    assert h.rates("missing", 2) == [0.0, 0.0]


def test_one_round_is_no_rate_yet() -> None:
    h = History()
    rounds(h, "q", [(7,)])
    assert h.rates("q", 1) == [0.0]


def test_samples_on_the_clock_grid_newest_first() -> None:
    h = History()
    last = rounds(h, "q", [(i * 10, i) for i in range(10)])  # t = 1000 .. 1045
    d = h.details("q", ["a", "b"], 0, 20, 5, now=last + 2)
    # 1045, 1040, ... 1025: the value at the latest round at or before each point.
    assert [s["sample"] for s in d["a"]["samples"]] == [90, 80, 70, 60, 50]
    assert [s["timestamp"] for s in d["a"]["samples"]] == [1045000, 1040000, 1035000,
                                                          1030000, 1025000]
    assert d["a"]["avg_rate"] == 2.0 and d["a"]["avg"] == 70.0
    assert d["a"]["rate"] == 2.0
    # A point between rounds holds the earlier round; before the first round, 0.
    fine = h.details("q", ["a"], 0, 60, 10, now=last + 2)["a"]["samples"]
    assert [s["sample"] for s in fine] == [80, 60, 40, 20, 0, 0, 0]  # 1040 back to 980
    assert [s["sample"] for s in h.details("q", ["a"], 0, 4, 1, now=1008)["a"]["samples"]
            ] == [10, 10, 10, 10, 0]  # 1008 back to 1004; the round at 1005 holds 10
    # Offsets pick later values; no range asked is the rate alone, as RabbitMQ.
    assert h.details("q", ["b"], 1, None, None, now=last) == {"b": {"rate": 0.2}}


def test_an_object_not_recorded_in_a_round_is_dropped() -> None:
    h = History()
    rounds(h, "gone", [(1,), (2,)])
    h.record("other", (1,), 2000.0)
    h.end_round()
    assert "gone" not in h.rings and h.rates("gone", 1) == [0.0]
    assert [s["sample"] for s in h.details("gone", ["x"], 0, 10, 5, now=2000.0)["x"]["samples"]
            ] == [0, 0, 0]


def test_the_ring_is_bounded_and_memory_fixed_per_object() -> None:
    h = History(keep=6)
    last = rounds(h, "q", [(i,) for i in range(50)])
    assert h.memory() == 6 * 8
    samples = h.details("q", ["x"], 0, 60, 5, now=last)["x"]["samples"]
    # Six rounds kept; before them, the oldest kept value (not 0: the queue existed).
    assert [s["sample"] for s in samples] == [49, 48, 47, 46, 45, 44, 44, 44, 44, 44, 44, 44, 44]


@given(st.lists(st.integers(min_value=0, max_value=2**40), min_size=1, max_size=40),
       st.integers(min_value=2, max_value=12), st.sampled_from([1, 5, 10, 15, 60]),
       st.floats(min_value=0, max_value=20))
def test_samples_match_a_naive_list(values: list[int], keep: int, incr: int, late: float
                                    ) -> None:
    h = History(keep=keep)
    last = rounds(h, "q", [(v,) for v in values])
    now = last + late
    kept = [(1000.0 + 5 * i, v) for i, v in enumerate(values)][-keep:]
    before = 0 if len(values) <= keep else kept[0][1]
    expected = []
    for k in range(120 // incr + 1):
        t = int(now // incr) * incr - k * incr
        at_or_before = [v for tv, v in kept if tv <= t]
        expected.append(at_or_before[-1] if at_or_before else before)
    got = h.details("q", ["x"], 0, 120, incr, now=now)["x"]["samples"]
    assert [s["sample"] for s in got] == expected


def channel(vhost: str, **published: tuple[int, int]) -> SimpleNamespace:
    stats = {name: SimpleNamespace(publish=pin, queues={"q1": pout})
             for name, (pin, pout) in published.items()}
    return SimpleNamespace(vhost=SimpleNamespace(name=vhost), exchange_stats=stats)


def test_exchange_tally_sums_channels_and_keeps_closed_ones_counts() -> None:
    tally = ExchangeTally()
    exchanges = {("/", "x"), ("/", "y")}
    a, b = channel("/", x=(5, 4)), channel("/", x=(2, 2), y=(1, 0))
    assert tally.tally([a, b], exchanges) == {("/", "x"): [7, 6], ("/", "y"): [1, 0]}
    a.exchange_stats["x"].publish = 9
    assert tally.tally([b, a], exchanges)[("/", "x")] == [11, 6]
    # b closes: what it had counted stays.
    assert tally.tally([a], exchanges) == {("/", "x"): [11, 6], ("/", "y"): [1, 0]}
    # y deleted: forgotten; a channel's counts for a missing exchange are not shown.
    assert tally.tally([a, channel("/", z=(3, 3))], {("/", "x")}) == {("/", "x"): [11, 6]}


def test_chart_ranges_parse_and_lists_bound_their_points() -> None:
    r = views.Ranges.of({"lengths_age": "600", "lengths_incr": "5", "msg_rates_age": "60",
                         "msg_rates_incr": "1"})
    assert r.lengths == (600, 5) and r.msg_rates == (60, 1) and r.data_rates == (None, None)
    b = r.bounded(1000)  # 20 points a field for each of 1,000 objects
    assert b.lengths == (600, 30) and b.msg_rates == (60, 3) and b.data_rates == (None, None)
    assert r.bounded(10) == r  # few objects: every point asked
    assert views.Ranges.of({"lengths_age": "x"}) == views.NO_RANGES
    assert views.Ranges.of({"lengths_age": "-5"}) == views.NO_RANGES


def test_exchange_tally_counts_http_publishes_as_closed_channels() -> None:
    tally = ExchangeTally()
    tally.add("/", "x", SimpleNamespace(publish=2, queues={"q": 2, "r": 2}))
    tally.add("/", "x", SimpleNamespace(publish=0, queues={}))  # refused before the lookup
    assert tally.tally([], {("/", "x")}) == {("/", "x"): [2, 4]}
