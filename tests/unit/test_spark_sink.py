"""The sink's writers and the confirming publisher, driven directly (no JVM) against a real broker."""

from __future__ import annotations

import datetime
import pickle

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from leveret.spark_sink import wire  # noqa: E402
from leveret.spark_sink.amqp_client import Connection  # noqa: E402
from leveret.spark_sink.publisher import (  # noqa: E402
    ConnectionPool,
    PublishError,
    PublishOptions,
    publish_batches,
)
from leveret.spark_sink.sink import LeveretBatchWriter, LeveretStreamWriter  # noqa: E402


def drain(url: str, queue: str, expect: int) -> list[tuple]:
    """(routing_key, properties, body) of up to ``expect`` messages, acked."""
    out = []
    with Connection(url) as conn:
        conn.qos(1000)
        conn.consume(queue)
        while len(out) < expect and (conn.deliveries or conn.pump(3)):
            while conn.deliveries:
                d = conn.deliveries.popleft()
                out.append((d.routing_key, wire.decode_properties(d.raw_properties), d.body))
                conn.ack(d.delivery_tag)
    return out


def setup_exchange(url: str, name: str) -> None:
    with Connection(url) as conn:
        conn.exchange_declare(name)
        for key in ("a", "b"):
            conn.queue_declare(f"{name}-{key}")
            conn.queue_bind(f"{name}-{key}", name, key)


def test_rows_become_persistent_messages_with_properties_and_stable_ids(broker, qname):
    setup_exchange(broker.url, qname)
    ts = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC)
    batch = pa.RecordBatch.from_pydict({
        "body": pa.array([b"one", b"two", b"three"]),
        "routing_key": ["a", "b", "a"],
        "message_id": [None, "keep-me", None],
        "content_type": ["text/plain", None, None],
        "headers": pa.array([[("h", "1")], None, []], pa.map_(pa.string(), pa.string())),
        "timestamp": pa.array([ts, None, None], pa.timestamp("us", tz="UTC")),
        "unrelated": [1, 2, 3],
    })
    writer = LeveretBatchWriter({"url": broker.url, "exchange": qname,
                                 "messageIdPrefix": "job7-"}, batch.schema.names)
    writer = pickle.loads(pickle.dumps(writer))  # built on the driver, used on executors
    result = writer.write(iter([batch]))
    assert result.count == 3
    a = drain(broker.url, f"{qname}-a", 2)
    b = drain(broker.url, f"{qname}-b", 1)
    assert [m[2] for m in a] == [b"one", b"three"] and b[0][2] == b"two"
    first = a[0][1]
    assert first["delivery_mode"] == 2 and first["message_id"] == "job7-0-0"
    assert first["content_type"] == "text/plain" and first["headers"] == {"h": "1"}
    assert first["timestamp"] == int(ts.timestamp())
    assert a[1][1]["message_id"] == "job7-0-2" and b[0][1]["message_id"] == "keep-me"


def test_stream_writer_ids_name_query_batch_partition_and_index(broker, qname, monkeypatch):
    setup_exchange(broker.url, qname)
    props = {"streaming.sql.batchId": "42", "sql.streaming.queryId": "q-1"}
    monkeypatch.setattr("leveret.spark_sink.sink.task_local_property", props.get)
    monkeypatch.setattr("leveret.spark_sink.sink.task_partition_id", lambda: 3)
    batch = pa.RecordBatch.from_pydict({"body": ["x", "y"]})  # string bodies are UTF-8
    writer = LeveretStreamWriter({"url": broker.url, "exchange": qname, "routingKey": "b",
                                  "routingKeyColumn": ""}, ["body"])
    assert writer.write(iter([batch])).count == 2
    got = drain(broker.url, f"{qname}-b", 2)
    assert [(m[1]["message_id"], m[2]) for m in got] == [("q-1-42-3-0", b"x"), ("q-1-42-3-1", b"y")]


def test_many_rows_pipelined_through_a_small_window(broker, qname):
    setup_exchange(broker.url, qname)
    n = 5000
    batch = pa.RecordBatch.from_pydict({"body": [b"z" * 1024] * n, "routing_key": ["a"] * n})
    opts = PublishOptions.from_options({"url": broker.url, "exchange": qname,
                                        "confirmWindow": "64"}).checked(batch.schema.names)
    assert publish_batches([batch, batch], opts, "p-") == 2 * n
    with Connection(broker.url) as conn:
        assert conn.queue_declare(f"{qname}-a", passive=True).message_count == 2 * n
        conn.queue_delete(f"{qname}-a")


def test_rows_are_written_in_chunks_within_the_confirm_window(broker, qname):
    """Rows go out a chunk at a time, and a chunk never takes more than the room the
    window has left; null bodies are empty messages, per-row keys route each row."""
    setup_exchange(broker.url, qname)
    pool = ConnectionPool()
    conn = pool.take(broker.url)
    pool.give(broker.url, conn)
    outstanding: list[int] = []
    publish_encoded = conn.publish_encoded

    def watched(frames: bytes, count: int) -> None:
        publish_encoded(frames, count)
        outstanding.append(conn.confirms.outstanding)

    conn.publish_encoded = watched
    n = 600
    batch = pa.RecordBatch.from_pydict({
        "body": pa.array([b"z" * 10, None] * (n // 2), pa.binary()),
        "routing_key": ["a", "b"] * (n // 2)})
    opts = PublishOptions.from_options({"url": broker.url, "exchange": qname,
                                        "confirmWindow": "50"}).checked(batch.schema.names)
    assert publish_batches([batch], opts, "c-", pool) == n
    assert len(outstanding) >= n // 50 and max(outstanding) <= 50
    pool.close_all()
    a, b = drain(broker.url, f"{qname}-a", n // 2), drain(broker.url, f"{qname}-b", n // 2)
    assert len(a) == len(b) == n // 2
    assert {m[2] for m in a} == {b"z" * 10} and {m[2] for m in b} == {b""}
    assert [m[1]["message_id"] for m in a[:2]] == ["c-0", "c-2"]


def test_errors_are_named(broker, qname):
    with pytest.raises(ValueError, match="needs a 'body' column"):
        LeveretBatchWriter({"url": broker.url}, ["payload"])
    with pytest.raises(ValueError, match="routingKeyColumn is 'rk'"):
        LeveretBatchWriter({"url": broker.url, "routingKeyColumn": "rk"}, ["body"])
    with pytest.raises(ValueError, match="needs option 'url'"):
        LeveretBatchWriter({}, ["body"])
    setup_exchange(broker.url, qname)
    batch = pa.RecordBatch.from_pydict({"body": [b"lost"], "routing_key": ["nowhere"]})
    opts = PublishOptions(url=broker.url, exchange=qname, mandatory=True).checked(["body",
                                                                                  "routing_key"])
    with pytest.raises(PublishError, match=r"1 message.*unroutable.*'nowhere'.*312 NO_ROUTE"):
        publish_batches([batch], opts, "m-")
    missing = PublishOptions(url=broker.url, exchange=f"{qname}-missing").checked(["body"])
    with pytest.raises(Exception, match="404"):
        publish_batches([batch], missing, "m-")


def test_a_worker_reuses_its_connection_across_tasks_and_drops_broken_ones(broker, qname):
    setup_exchange(broker.url, qname)
    pool = ConnectionPool()
    batch = pa.RecordBatch.from_pydict({"body": [b"x"] * 10, "routing_key": ["a"] * 10})
    opts = PublishOptions(url=broker.url, exchange=qname).checked(batch.schema.names)
    assert publish_batches([batch], opts, "t1-", pool) == 10
    first = pool.take(broker.url)
    pool.give(broker.url, first)
    assert publish_batches([batch], opts, "t2-", pool) == 10  # next micro-batch, same socket
    assert pool.take(broker.url) is first
    first.sock.close()  # e.g. the broker restarted between batches
    pool.give(broker.url, first)
    assert publish_batches([batch], opts, "t3-", pool) == 10  # a fresh connection, no error
    assert pool.take(broker.url) is not first
    # The same broker under other credentials is another key.
    assert ConnectionPool.key(broker.url) != ConnectionPool.key(
        broker.url.replace("guest:guest", "guest:other"))
    # A failed task closes its connection instead of pooling it.
    missing = PublishOptions(url=broker.url, exchange=f"{qname}-missing").checked(["body"])
    with pytest.raises(Exception, match="404"):
        publish_batches([batch], missing, "m-", pool)
    assert not pool._idle
    pool.close_all()
    assert len(drain(broker.url, f"{qname}-a", 30)) == 30


def test_a_json_headers_column_is_published_with_typed_values(broker, qname):
    setup_exchange(broker.url, qname)
    batch = pa.RecordBatch.from_pydict({
        "body": [b"a", b"b", b"c"], "routing_key": ["a", "a", "a"],
        "headers": ['{"n":42,"ratio":0.5,"ok":true,"s":"v","nested":{"l":[1,"x"]}}', None, "{}"],
    })
    opts = PublishOptions(url=broker.url, exchange=qname).checked(batch.schema.names)
    assert publish_batches([batch], opts, "j-") == 3
    got = drain(broker.url, f"{qname}-a", 3)
    assert got[0][1]["headers"] == {"n": 42, "ratio": 0.5, "ok": True, "s": "v",
                                    "nested": {"l": [1, "x"]}}
    assert "headers" not in got[1][1] and got[2][1]["headers"] == {}
    bad = pa.RecordBatch.from_pydict({"body": [b"a"], "headers": ["[1, 2]"]})
    with pytest.raises(ValueError, match="must hold a JSON object"):
        publish_batches([bad], PublishOptions(url=broker.url, exchange=qname).checked(["body"]),
                        "j-")


def test_a_task_leaves_what_survived_before_it_out_of_later_collections(broker, qname):
    """PySpark's daemon runs gc.collect() after every task; the sink freezes the survivors
    first (process_tuning.py) so that collection walks only what tasks create."""
    import gc

    from pyspark import TaskContext

    setup_exchange(broker.url, qname)
    batch = pa.RecordBatch.from_pydict({"body": [b"z"], "routing_key": ["a"]})
    opts = PublishOptions.from_options({"url": broker.url, "exchange": qname})
    gc.unfreeze()
    try:
        survivor = [object() for _ in range(100)]
        assert publish_batches([batch], opts, "gc-") == 1
        assert gc.get_freeze_count() == 0  # not in a Spark task: the process is not ours
        TaskContext._setTaskContext(TaskContext._getOrCreate())  # what a Spark worker has
        assert publish_batches([batch], opts, "gc-") == 1
        assert gc.get_freeze_count() >= len(survivor)
    finally:
        TaskContext._setTaskContext(None)
        gc.unfreeze()


_BATCHES = """
import resource, sys
from leveret.spark_sink.process_tuning import tune_heap
if sys.argv[1] == "tuned":
    assert tune_heap()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
seen = []
for size in (8 << 20, (8 << 20) + 4096, (8 << 20) - 4096):  # three batches' partition blobs
    before = faults()
    blob = b"x" * size  # every page written, as a copy writes them
    seen.append(faults() - before)
    del blob
print(*seen)
"""


@pytest.mark.skipif(__import__("platform").libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_a_tuned_heap_gives_the_next_batch_the_pages_of_the_last(tmp_path):
    """process_tuning.tune_heap: glibc returns a freed batch-sized block to the kernel, so
    the next batch's block is fresh pages to fault in and zero; tuned, it is the same
    memory again. Run in fresh interpreters, one as glibc leaves it, one tuned."""
    import subprocess
    import sys

    def run(mode: str) -> list[int]:
        out = subprocess.run([sys.executable, "-c", _BATCHES, mode], check=True,
                             capture_output=True, text=True).stdout
        return [int(n) for n in out.split()]

    pages = (8 << 20) // 4096
    plain, tuned = run("plain"), run("tuned")
    assert min(plain[1:]) > pages // 2, plain  # what the tuning is for
    assert max(tuned[1:]) < pages // 20, tuned


def test_only_processes_spark_started_are_tuned(monkeypatch):
    import sys
    import types

    from leveret.spark_sink import process_tuning

    tuned: list[bool] = []
    monkeypatch.setattr(process_tuning, "tune_heap", lambda: tuned.append(True) or True)
    monkeypatch.setattr(process_tuning, "_heap_tuned", False)
    assert not process_tuning.in_spark_python_process()  # pytest's process: not ours
    process_tuning.keep_freed_memory()
    assert tuned == []
    spec = types.SimpleNamespace(name="pyspark.daemon")
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__spec__=spec))
    assert process_tuning.in_spark_python_process()
    process_tuning.keep_freed_memory()
    process_tuning.keep_freed_memory()
    assert tuned == [True]  # once per process
