"""The Spark source's stream mode driven without a JVM: Spark's planning calls, in order.

Spark calls ``initialOffset``, ``latestOffset``, ``partitions`` and ``commit`` on the
reader in its driver; these tests make the same calls against a real broker and check
the offsets and rows a query would see, including a restart that replays a batch
from the offset log and two readers that do not disturb each other.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from leveret.spark_sink import wire
from leveret.spark_sink.amqp_client import AmqpError, Connection
from leveret.spark_sink.stream_source import StreamBatchReader, StreamOffsetReader

STREAM = {"x-queue-type": "stream"}


def publish_stream(url: str, queue: str, ids: range) -> None:
    with Connection(url) as conn:
        conn.queue_declare(queue, arguments=STREAM)
        conn.confirm_select()
        for i in ids:
            conn.publish("", queue, wire.encode_properties({"message_id": f"m{i}"}),
                         f"payload {i}".encode())
        conn.wait_window(0)


def reader(url: str, queue: str, **extra: Any) -> StreamOffsetReader:
    return StreamOffsetReader({"url": url, "queue": queue, "stream": "true",
                               "refillTimeoutMs": "30000", **extra})


def rows(r: StreamOffsetReader, start: dict, end: dict) -> list[tuple[int, str]]:
    out = []
    for part in r.partitions(start, end):
        for batch in r.read(part):
            d = batch.to_pydict()
            out += list(zip(d["seq"], d["message_id"], strict=True))
    return out


def test_batches_are_offset_ranges_and_a_restart_replays_the_uncommitted_one(broker, qname):
    url = broker.url
    publish_stream(url, qname, range(250))
    r = reader(url, qname, maxMessagesPerTrigger="100")
    start = r.initialOffset()
    assert start == {"offset": 0}
    end = r.latestOffset(start, ReadMaxRows(100))
    assert end == {"offset": 100}
    assert rows(r, start, end) == [(i, f"m{i}") for i in range(100)]
    r.commit(end)
    end2 = r.latestOffset(end, ReadMaxRows(100))
    assert end2 == {"offset": 200}
    r.stop()  # the driver dies before batch [100, 200) commits

    again = reader(url, qname, maxMessagesPerTrigger="100")
    assert rows(again, end, end2) == [(i, f"m{i}") for i in range(100, 200)]
    again.commit(end2)
    end3 = again.latestOffset(end2, ReadAllAvailable())
    assert end3 == {"offset": 250}
    assert rows(again, end2, end3) == [(i, f"m{i}") for i in range(200, 250)]
    assert again.latestOffset(end3, ReadAllAvailable()) == end3  # the log's end: no batch
    again.stop()

    # Nothing was consumed away: a second reader sees the whole stream from the start.
    other = reader(url, qname)
    first = other.initialOffset()
    whole = other.latestOffset(first, ReadAllAvailable())
    assert [o for o, _ in rows(other, first, whole)] == list(range(250))
    other.stop()


def test_starting_offset_and_a_classic_queue_refused(broker, qname):
    url = broker.url
    publish_stream(url, qname, range(10))
    r = reader(url, qname, startingOffset="7")
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    assert [o for o, _ in rows(r, start, end)] == [7, 8, 9]
    r.stop()
    with Connection(url) as conn:
        conn.queue_declare(f"{qname}-classic")
        conn.confirm_select()
        conn.publish("", f"{qname}-classic", wire.encode_properties({}), b"not a stream")
        conn.wait_window(0)
    classic = reader(url, f"{qname}-classic")
    with pytest.raises(AmqpError, match="x-stream-offset"):
        classic.latestOffset(classic.initialOffset(), ReadAllAvailable())
    classic.stop()
    with Connection(url) as conn:  # refused, not consumed away
        assert conn.queue_declare(f"{qname}-classic", passive=True).message_count == 1


def test_available_now_stops_at_the_end_the_stream_had_when_it_started(broker, qname):
    url = broker.url
    publish_stream(url, qname, range(30))
    r = reader(url, qname, maxMessagesPerTrigger="20")
    r.prepareForTriggerAvailableNow()
    publish_stream(url, qname, range(30, 40))  # after the query started: not this run's
    start = r.initialOffset()
    end = r.latestOffset(start, ReadMaxRows(20))
    assert end == {"offset": 20}
    r.commit(end)
    last = r.latestOffset(end, ReadMaxRows(20))
    assert last == {"offset": 30}
    assert [o for o, _ in rows(r, end, last)] == list(range(20, 30))
    r.commit(last)
    assert r.latestOffset(last, ReadMaxRows(20)) == last
    r.stop()


def test_a_batch_read_of_a_stream_reads_from_the_starting_offset_and_consumes_nothing(
        broker, qname):
    url = broker.url
    publish_stream(url, qname, range(40))
    opts = {"url": url, "queue": qname, "stream": "true"}
    for extra, want in (({}, range(40)), ({"startingOffset": "35"}, range(35, 40)),
                        ({"maxMessages": "10"}, range(10))):
        batch = StreamBatchReader({**opts, **extra})
        got = [seq for part in batch.partitions() for b in batch.read(part)
               for seq in b.to_pydict()["seq"]]
        assert got == list(want), extra


def test_stream_filter_option_reads_only_matching_messages_at_their_offsets(broker, qname):
    url = broker.url
    with Connection(url) as conn:
        conn.queue_declare(qname, arguments=STREAM)
        conn.confirm_select()
        for i in range(30):  # a, b, none, a, b, none, ...
            value = ("a", "b", None)[i % 3]
            headers = {"x-stream-filter-value": value} if value else None
            conn.publish("", qname, wire.encode_properties(
                {"message_id": f"m{i}", "headers": headers}), b"p")
        conn.wait_window(0)
    r = reader(url, qname, streamFilter="b")
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == {"offset": 29}  # one past the last "b" (offset 28)
    assert rows(r, start, end) == [(i, f"m{i}") for i in range(1, 30, 3)]
    r.commit(end)
    r.stop()
    both = reader(url, qname, streamFilter="a, b", streamMatchUnfiltered="true")
    end = both.latestOffset(both.initialOffset(), ReadMaxRows(12))
    assert [o for o, _ in rows(both, {"offset": 0}, end)] == list(range(12))
    both.stop()
    batch = StreamBatchReader({"url": url, "queue": qname, "stream": "true",
                               "streamFilter": "a", "startingOffset": "10"})
    got = [seq for part in batch.partitions() for b in batch.read(part)
           for seq in b.to_pydict()["seq"]]
    assert got == list(range(12, 30, 3))
    with pytest.raises(ValueError, match="streamFilter"):
        reader(url, qname, streamMatchUnfiltered="true")
