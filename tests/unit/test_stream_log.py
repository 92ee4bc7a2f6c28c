"""The pure parts of stream queues: the segment index, the offset header splice, and the
argument parsers (no broker)."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands

from leveret.model.errors import ChannelError, ConnectionError_
from leveret.model.field_table import Long, Timestamp
from leveret.model.properties import decode_properties, encode_properties
from leveret.queues.stream_arguments import (
    FIRST,
    LAST,
    NEXT,
    OFFSET,
    TIMESTAMP,
    OffsetSpec,
    check_consume,
    parse_filter,
    parse_max_age,
    parse_offset,
)
from leveret.queues.stream_header import OffsetSplicer, with_stream_offset
from leveret.queues.stream_log import StreamIndex
from leveret.queues.stream_tracking import AckWindow

WHAT = "queue 's' in vhost '/'"


# -- the index --------------------------------------------------------------------------------

def fill(index: StreamIndex, chunks: list[tuple[int, int, int]]) -> None:
    """Append chunks of (messages, bytes each, arrival ms)."""
    offset = index.next_offset
    for count, size, ts in chunks:
        for i in range(count):
            index.append(offset, size, ts, i == 0)
            offset += 1


def test_segments_close_at_chunk_boundaries_once_full() -> None:
    index = StreamIndex(segment_bytes=1_000)
    fill(index, [(3, 400, 1), (3, 400, 2), (1, 10, 3)])  # 1,200 B chunk overfills, not split
    assert [(s.first, s.next, s.bytes) for s in index.segments] == [(0, 3, 1200), (3, 6, 1200),
                                                                    (6, 7, 10)]
    assert index.last_chunk == 6
    assert (index.first_offset, index.next_offset, index.count) == (0, 7, 7)


def test_retention_drops_whole_oldest_segments_and_keeps_the_last() -> None:
    index = StreamIndex(segment_bytes=1_000)
    fill(index, [(2, 500, ts) for ts in range(10)])  # ten segments of 1,000 B
    dropped = index.expired(max_bytes=3_500, max_age_ms=None, now_ms=100)
    assert [s.first for s in dropped] == [0, 2, 4, 6, 8, 10, 12]
    assert index.first_offset == 14 and index.total_bytes == 3_000
    # Age: every segment but the last is old; the last always stays.
    dropped = index.expired(max_bytes=None, max_age_ms=1, now_ms=1_000)
    assert len(dropped) == 2 and len(index.segments) == 1
    assert index.expired(max_bytes=0, max_age_ms=1, now_ms=10**9) == []
    assert index.count == 2 and index.next_offset == 20


def test_seek_time_finds_the_first_segment_with_a_later_chunk() -> None:
    index = StreamIndex(segment_bytes=100)
    fill(index, [(1, 100, 10), (1, 100, 20), (1, 100, 30)])
    assert index.seek_time(0) == 0
    assert index.seek_time(15) == 1
    assert index.seek_time(30) == 2
    assert index.seek_time(31) == 3  # nothing that recent: from the end


# -- the header splice ---------------------------------------------------------------------------

header_values = st.one_of(st.integers(-(2**31), 2**31 - 1), st.text(max_size=10), st.booleans(),
                          st.lists(st.integers(0, 100), max_size=3))
properties = st.builds(
    commands.Basic.Properties,
    content_type=st.none() | st.text("abc/", max_size=8),
    content_encoding=st.none() | st.just("gzip"),
    headers=st.none() | st.dictionaries(st.text("xyz-", min_size=1, max_size=6), header_values,
                                        max_size=4),
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 9),
    correlation_id=st.none() | st.text("0123", max_size=5),
    message_id=st.none() | st.just("id"),
)


@settings(max_examples=200, deadline=None)
@given(properties, st.integers(0, 2**63 - 1))
def test_splice_adds_the_offset_and_changes_nothing_else(props: commands.Basic.Properties,
                                                         offset: int) -> None:
    raw = encode_properties(props)
    before = decode_properties(raw)
    spliced = decode_properties(with_stream_offset(raw, offset))
    assert spliced.headers == {**(before.headers or {}), "x-stream-offset": offset}
    for name in ("content_type", "content_encoding", "delivery_mode", "priority",
                 "correlation_id", "message_id"):
        assert getattr(spliced, name) == getattr(before, name)


@given(st.lists(st.tuples(st.sampled_from([0, 1, 2]), st.integers(-2**63, 2**63 - 1)),
                max_size=20),
       st.lists(properties, min_size=3, max_size=3))
def test_a_splicer_splices_as_the_function_does_when_properties_repeat_or_change(
        run: list[tuple[int, int]], props: list[commands.Basic.Properties]) -> None:
    splicer = OffsetSplicer()
    for which, offset in run:  # runs of equal properties, then a change, as a page has
        raw = encode_properties(props[which])
        assert splicer.splice(raw, offset) == with_stream_offset(raw, offset)


def test_a_splicer_refuses_what_the_function_refuses_and_goes_on() -> None:
    splicer = OffsetSplicer()
    with pytest.raises(ValueError):
        splicer.splice(b"\x20\x00\x00\x00\x00\x09ab", 1)
    assert splicer.splice(b"\x00\x00", 7) == with_stream_offset(b"\x00\x00", 7)


def test_splice_sends_a_signed_64_bit_long() -> None:
    headers = decode_properties(with_stream_offset(b"\x00\x00", 7)).headers
    assert headers == {"x-stream-offset": 7} and type(headers["x-stream-offset"]) is Long


def test_splice_refuses_a_truncated_headers_table() -> None:
    with pytest.raises(ValueError):
        with_stream_offset(b"\x20\x00\x00\x00\x00\x09ab", 1)


# -- arguments ------------------------------------------------------------------------------------

def test_max_age_units() -> None:
    assert parse_max_age("7D") == 7 * 86_400_000
    assert parse_max_age("1Y") == 365 * 86_400_000
    assert parse_max_age("2M") == 60 * 86_400_000
    assert (parse_max_age("3h"), parse_max_age("4m"), parse_max_age("5s")) == (
        3 * 3_600_000, 4 * 60_000, 5_000)
    for bad in ("0s", "7d", "D", "1A", "-1s", " 1s", "", 5, None):
        assert parse_max_age(bad) is None


def test_offset_specifications() -> None:
    now = 1_000_000
    assert parse_offset(None, now, WHAT) == OffsetSpec(NEXT)
    assert parse_offset("first", now, WHAT) == OffsetSpec(FIRST)
    assert parse_offset(b"last", now, WHAT) == OffsetSpec(LAST)
    assert parse_offset(42, now, WHAT) == OffsetSpec(OFFSET, 42)
    assert parse_offset("100s", now, WHAT) == OffsetSpec(TIMESTAMP, now - 100_000)
    when = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    assert parse_offset(when, now, WHAT) == OffsetSpec(TIMESTAMP, int(when.timestamp()) * 1000)
    assert parse_offset(Timestamp(10**12), now, WHAT) == OffsetSpec(TIMESTAMP, 10**15)
    for bad, term in (("bogus", '{longstr,<<"bogus">>}'), (True, "{bool,true}")):
        with pytest.raises(ChannelError) as caught:
            parse_offset(bad, now, WHAT)
        assert caught.value.detail == (f"invalid arg 'x-stream-offset' for {WHAT}: "
                                       f"{{invalid_stream_offset_arg,{term}}}")


def test_consume_checks_in_rabbitmq_order() -> None:
    with pytest.raises(ConnectionError_) as hard:
        check_consume(no_ack=True, prefetch=0, global_prefetch=0, arguments={}, what=WHAT)
    assert hard.value.code == 540
    with pytest.raises(ChannelError) as soft:
        check_consume(no_ack=False, prefetch=0, global_prefetch=10, arguments={}, what=WHAT)
    assert soft.value.detail == f"consumer prefetch count is not set for '{WHAT}'"
    check_consume(no_ack=False, prefetch=1, global_prefetch=0, arguments={"x-other": 1},
                  what=WHAT)


def test_filters() -> None:
    assert parse_filter({}) == (None, False)
    assert parse_filter({"x-stream-filter": "a"}) == (frozenset({"a"}), False)
    assert parse_filter({"x-stream-filter": ["a", b"b", 3],
                         "x-stream-match-unfiltered": True}) == (frozenset({"a", "b"}), True)


def test_ack_window_keeps_the_highest_contiguously_settled_offset() -> None:
    window = AckWindow(floor=-1)
    for offset in (0, 1, 2, 5, 6):
        window.delivered(offset)
    assert window.settled(1) is False and window.floor == -1  # 0 still out
    assert window.settled(0) is True and window.floor == 1
    assert window.settled(5) is False and window.floor == 1
    assert window.settled(2) is True and window.floor == 5  # 2, then the settled 5
    assert window.settled(6) is True and window.floor == 6
    window.skipped(9)  # filtered out with nothing pending: passed
    assert window.floor == 9
    assert window.settled(3) is False  # never delivered (or long settled): no change
