"""The streaming source and batch reader, driven method by method (no JVM) against a real broker.

Spark calls ``latestOffset``/``partitions``/``commit``/``stop`` on the driver and
``read`` on executors; these tests make the same calls in the same order, the
way ``MicroBatchExecution`` does, and check what the broker sees.
"""

from __future__ import annotations

import json
import pickle

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows  # noqa: E402

from leveret.spark_sink import wire  # noqa: E402
from leveret.spark_sink.amqp_client import Connection  # noqa: E402
from leveret.spark_sink.datasource import LeveretDataSource  # noqa: E402
from leveret.spark_sink.schema import ARROW_SCHEMA, ARROW_SCHEMA_JSON_HEADERS  # noqa: E402
from leveret.spark_sink.source import (  # noqa: E402
    LeveretBatchReader,
    LeveretStreamReader,
    SourceOptions,
    consume_windowed,
)


def fill(url: str, queue: str, count: int, **props: object) -> None:
    with Connection(url) as conn:
        conn.queue_declare(queue)
        conn.confirm_select()
        for i in range(count):
            raw = wire.encode_properties({"delivery_mode": 2, "message_id": f"m{i}", **props})
            conn.publish("", queue, raw, f"body-{i}".encode())
        conn.wait_window(0)


def counts(url: str, queue: str) -> int:
    with Connection(url) as conn:
        return int(conn.queue_declare(queue, passive=True).message_count)


def rows(reader: object, start: dict, end: dict) -> list[dict]:
    """partitions() on the 'driver', pickled, read() on the 'executor'."""
    out = []
    for part in reader.partitions(start, end):  # type: ignore[attr-defined]
        part = pickle.loads(pickle.dumps(part))
        for batch in reader.read(part):  # type: ignore[attr-defined]
            json_headers = reader.opts.headers_as_json  # type: ignore[attr-defined]
            assert batch.schema == (ARROW_SCHEMA_JSON_HEADERS if json_headers else ARROW_SCHEMA)
            out.extend(batch.to_pylist())
    return out


def new_reader(url: str, queue: str, **opts: str) -> LeveretStreamReader:
    reader = LeveretStreamReader({"url": url, "queue": queue, "polltimeoutms": "300", **opts})
    return pickle.loads(pickle.dumps(reader))  # Spark pickles it before use; must not connect


def test_micro_batches_ack_only_after_the_next_plan(broker, qname):
    fill(broker.url, qname, 25, content_type="text/plain", headers={"k": 1, "b": "v"})
    reader = new_reader(broker.url, qname, maxMessagesPerTrigger="10")
    assert reader.getDefaultReadLimit() == ReadMaxRows(10)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(10))
    assert end == {"seq": 10}
    batch = rows(reader, start, end)
    assert [r["seq"] for r in batch] == list(range(10))
    first = batch[0]
    assert first["body"] == b"body-0" and first["message_id"] == "m0"
    assert first["routing_key"] == qname and first["exchange"] == ""
    assert first["content_type"] == "text/plain" and first["delivery_mode"] == 2
    assert dict(first["headers"]) == {"k": "1", "b": "v"} and first["redelivered"] is False
    assert counts(broker.url, qname) == 0  # all prefetched by the driver, none acked
    end2 = reader.latestOffset(end, ReadMaxRows(10))  # batch 0 is committed: acked now
    assert end2 == {"seq": 20}
    assert [r["message_id"] for r in rows(reader, end, end2)] == [f"m{i}" for i in range(10, 20)]
    end3 = reader.latestOffset(end2, ReadAllAvailable())
    assert end3 == {"seq": 25}
    reader.commit(end3)
    assert reader.latestOffset(end3, ReadAllAvailable()) == end3  # nothing new
    reader.stop()
    assert counts(broker.url, qname) == 0  # everything committed was acked


def test_a_crashed_driver_loses_nothing_and_a_replay_refills_the_batch(broker, qname):
    fill(broker.url, qname, 30)
    first = new_reader(broker.url, qname)
    start = first.initialOffset()
    end = first.latestOffset(start, ReadMaxRows(10))
    rows(first, start, end)
    end2 = first.latestOffset(end, ReadMaxRows(10))  # acks batch 0 (seq 0-9)
    rows(first, end, end2)
    first.stop()  # the driver dies while batch 1 runs: it stays in the offset log only
    assert counts(broker.url, qname) == 20

    second = new_reader(broker.url, qname)  # restarted: Spark replays (end, end2) first
    replay = rows(second, end, end2)
    assert [r["seq"] for r in replay] == list(range(10, 20))
    assert {r["message_id"] for r in replay} == {f"m{i}" for i in range(10, 20)}
    assert all(r["redelivered"] for r in replay)
    end3 = second.latestOffset(end2, ReadAllAvailable())
    assert end3 == {"seq": 30}
    rest = rows(second, end2, end3)
    assert {r["message_id"] for r in rest} == {f"m{i}" for i in range(20, 30)}
    second.latestOffset(end3, ReadAllAvailable())
    second.stop()
    assert counts(broker.url, qname) == 0


def test_available_now_stops_at_what_was_there(broker, qname):
    fill(broker.url, qname, 12)
    reader = new_reader(broker.url, qname)
    reader.prepareForTriggerAvailableNow()
    fill(broker.url, qname, 5)  # arrives after the trigger started: not part of this run
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(8))
    assert end == {"seq": 8}
    end2 = reader.latestOffset(end, ReadMaxRows(8))
    assert end2 == {"seq": 12}
    assert reader.latestOffset(end2, ReadMaxRows(8)) == end2
    reader.stop()
    assert counts(broker.url, qname) == 5


def test_missing_queue_and_options_are_clear_errors(broker, qname):
    with pytest.raises(ValueError, match="needs option 'queue'"):
        LeveretStreamReader({"url": broker.url})
    reader = new_reader(broker.url, qname)
    with pytest.raises(ValueError, match=f"queue '{qname}' does not exist"):
        reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    reader.stop()


def test_batch_reader_peeks_by_default_and_consumes_on_request(broker, qname):
    fill(broker.url, qname, 7)
    peek = LeveretBatchReader({"url": broker.url, "queue": qname, "numPartitions": "3"})
    parts = peek.partitions()
    assert len(parts) == 3
    got = [r for p in parts for b in peek.read(pickle.loads(pickle.dumps(p))) for r in b.to_pylist()]
    assert sorted(r["message_id"] for r in got) == sorted(f"m{i}" for i in range(7))
    assert counts(broker.url, qname) == 7
    take = LeveretBatchReader({"url": broker.url, "queue": qname, "consume": "true",
                               "maxMessages": "5"})
    got = [r for p in take.partitions() for b in take.read(p) for r in b.to_pylist()]
    assert len(got) == 5 and all(r["redelivered"] for r in got)
    assert counts(broker.url, qname) == 2


def test_the_window_holds_two_batches_and_splits_over_consumers_past_a_short(broker, qname):
    assert SourceOptions.from_options({"url": "u", "queue": "q"}).prefetch == 20000
    big = SourceOptions.from_options({"url": "u", "queue": "q", "maxMessagesPerTrigger": "50000"})
    assert big.prefetch == 100000  # the running batch (unacked until commit) and the next one
    fill(broker.url, qname, 30)
    with Connection(broker.url) as conn:
        assert consume_windowed(conn, qname, 100000) == 2  # 2 x 50,000: qos is a short
        got = []
        while len(got) < 30 and (conn.deliveries or conn.pump(3)):
            while conn.deliveries:
                got.append(conn.deliveries.popleft())
        tags = [d.delivery_tag for d in got]
        assert tags == sorted(tags) and len(got) == 30  # one tag sequence for the channel
        conn.ack(tags[-1], multiple=True)  # one ack settles both consumers' deliveries
    assert counts(broker.url, qname) == 0


def test_headers_as_json_keep_their_types(broker, qname):
    headers = {"n": 42, "big": 2**40, "ratio": 0.5, "ok": True, "none": None, "s": "v",
               "nested": {"list": [1, "two"]}, "raw": bytearray(b"bytes")}
    fill(broker.url, qname, 3, headers=headers)
    assert "headers string" in LeveretDataSource({"headersAsJson": "true"}).schema()
    assert "headers map<string,string>" in LeveretDataSource({}).schema()
    reader = new_reader(broker.url, qname, headersAsJson="true")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    got = rows(reader, start, end)
    assert len(got) == 3
    assert json.loads(got[0]["headers"]) == {**headers, "raw": "bytes"}  # JSON has no bytes
    reader.commit(end)
    reader.stop()


def test_small_batches_are_one_task_unless_numpartitions_says_otherwise():
    from leveret.spark_sink.source import MIN_PARTITION_MESSAGES, split

    def sizes(count: int, parts: int | None) -> list[int]:
        return [len(p.packed) for p in split(range(count), [b""] * count, parts)]

    assert sizes(5000, None) == [5000]
    assert sizes(2 * MIN_PARTITION_MESSAGES, None) == [MIN_PARTITION_MESSAGES] * 2
    assert sizes(50000, None) == [25000, 25000]  # at most DEFAULT_PARTITIONS
    assert sizes(5000, 3) == [1667, 1667, 1666] and sizes(2, 3) == [1, 1]
    assert SourceOptions.from_options({"url": "u", "queue": "q"}).partitions is None


def test_layout_of_a_declared_schema():
    from leveret.spark_sink.schema import ALL_COLUMNS, Layout

    assert Layout.of(None, False) == ALL_COLUMNS
    every = [(f.name, f.type) for f in ARROW_SCHEMA]
    spark_types = {"int32": "int", "int64": "bigint", "bool": "boolean",
                   "timestamp[us, tz=UTC]": "timestamp", "map<string, string>": "map<string,string>"}
    assert Layout.of([(n, spark_types.get(str(t), str(t))) for n, t in every],
                     False) == ALL_COLUMNS  # Spark hands the reader our own schema so
    picked = Layout.of([("seq", "bigint"), ("body", "binary"), ("headers", "map<string,string>")],
                       False)
    assert picked.arrow_schema().names == ["seq", "body", "headers"]
    assert Layout.of([("headers", "string")], True).arrow_schema().field("headers").type == "string"
    with pytest.raises(ValueError, match="'headers' is map<string,string>, not string"):
        Layout.of([("headers", "string")], False)
    with pytest.raises(ValueError, match="has no column 'colour'"):
        Layout.of([("colour", "string")], False)


def test_projected_partitions_decode_only_the_declared_columns(broker, qname):
    from leveret.spark_sink.schema import Layout

    fill(broker.url, qname, 5, content_type="text/plain")
    reader = LeveretStreamReader({"url": broker.url, "queue": qname, "polltimeoutms": "300"})
    reader.layout = Layout(False, ("content_type", "seq", "body"))
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    try:
        batches = [b for p in reader.partitions(start, end)
                   for b in reader.read(pickle.loads(pickle.dumps(p)))]
    finally:
        reader.stop()
    assert [b.schema.names for b in batches] == [["content_type", "seq", "body"]]
    assert batches[0].to_pylist() == [
        {"content_type": "text/plain", "seq": i, "body": f"body-{i}".encode()} for i in range(5)]
