"""The unacked map against a naive model: any sequence of deliveries and acks."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveret.amqp.unacked import UnackedMap, UnknownTag

ops = st.lists(st.one_of(
    st.tuples(st.just("deliver"), st.integers(1, 3)),
    st.tuples(st.just("ack"), st.integers(0, 40), st.booleans()),
    st.tuples(st.just("all")),
), max_size=80)


@given(ops)
def test_matches_a_naive_model(steps: list[tuple]) -> None:
    m: UnackedMap[str] = UnackedMap()
    model: dict[int, str] = {}
    next_tag = 1
    for step in steps:
        if step[0] == "deliver":
            for _ in range(step[1]):
                m.add(next_tag, f"d{next_tag}")
                model[next_tag] = f"d{next_tag}"
                next_tag += 1
        elif step[0] == "ack":
            _, tag, multiple = step
            if multiple:
                expected = sorted(t for t in model if tag == 0 or t <= tag)
                if tag and tag not in model:
                    expected = None
            else:
                expected = [tag] if tag in model else None
            if expected is None:
                with pytest.raises(UnknownTag):
                    m.take(tag, multiple)
                with pytest.raises(UnknownTag):
                    m.check(tag, multiple)
                continue
            m.check(tag, multiple)
            assert m.take(tag, multiple) == [model.pop(t) for t in expected]
        else:
            assert m.take_all() == [model[t] for t in sorted(model)]
            model.clear()
        assert len(m) == len(model)
        assert sorted(m.values()) == sorted(model.values())


def test_a_multiple_ack_after_a_deep_catch_up_compacts_the_map() -> None:
    # A consumer without a prefetch limit had 100,000 deliveries and acked all but the last
    # ten singly: their slots are holes at the front of the dict until it is compacted, and
    # every multiple ack would walk them (bench/unacked_micro.py).
    m = UnackedMap()
    for tag in range(1, 100_001):
        m.add(tag, f"d{tag}")
    sparse = sys.getsizeof(m._by_tag)
    for tag in range(1, 99_991):
        assert m.take_one(tag) == f"d{tag}"
    assert m.take(99_995, True) == [f"d{t}" for t in range(99_991, 99_996)]
    assert sys.getsizeof(m._by_tag) < sparse // 100  # copied compact: no holes to walk
    assert m.take(0, True) == [f"d{t}" for t in range(99_996, 100_001)]
