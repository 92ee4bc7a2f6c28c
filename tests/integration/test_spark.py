"""The Spark bridge end to end: a real local SparkSession against a real Leveret broker.

One ``local[2]`` session for the module (starting one costs 6-15 s). Every
test checks counts on the broker side with the bridge's own small client:
count in = count out, and the only duplicates are messages the broker
redelivered. Skipped cleanly without pyspark, pyarrow or Java.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")
if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
    pytest.skip("Java is not installed (PySpark needs a JVM)", allow_module_level=True)

from leveret.spark_sink import publisher, register, wire
from leveret.spark_sink.amqp_client import Connection

# A JVM driver on a loaded 2-core machine (load average 14) took 50-60 s per start-up step:
# the per-test bound only stops a hang, the waits below are for states.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]").appName("leveret-tests")
        .config("spark.driver.memory", "512m")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


def fill(url: str, queue: str, ids: range, prefix: str = "m",
         arguments: dict[str, Any] | None = None) -> None:
    with Connection(url) as conn:
        conn.queue_declare(queue, arguments=arguments)
        conn.confirm_select()
        for i in ids:
            raw = wire.encode_properties({"delivery_mode": 2, "message_id": f"{prefix}{i}"})
            conn.publish("", queue, raw, f"payload {i}".encode())
            if conn.confirms and conn.confirms.outstanding > 1000:
                conn.wait_window(500)
        conn.wait_window(0)


def bind_out(url: str, exchange: str, queue: str) -> None:
    with Connection(url) as conn:
        conn.exchange_declare(exchange)
        conn.queue_declare(queue)
        conn.queue_bind(queue, exchange, "out")


def take_all(url: str, queue: str) -> list[dict]:
    """Every message in ``queue`` (acked), as decoded properties plus body."""
    out = []
    with Connection(url) as conn:
        conn.qos(2000)
        conn.consume(queue)
        while conn.deliveries or conn.pump(1.0):
            last = 0
            while conn.deliveries:
                d = conn.deliveries.popleft()
                out.append({**wire.decode_properties(d.raw_properties), "body": d.body})
                last = d.delivery_tag
            if last:
                conn.ack(last)
    return out


def wait_for(done: Any, timeout: float = 300.0) -> bool:
    """Wait for a state, not a budget: the deadline only ends a wait that would hang (a
    Spark driver starting on a busy 2-core machine took 60 s before its first batch)."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        time.sleep(0.1)
    return bool(done())


def depth(url: str, queue: str) -> int:
    with Connection(url) as conn:
        return int(conn.queue_declare(queue, passive=True).message_count)


def source(spark: Any, url: str, queue: str, per_trigger: int) -> Any:
    return (spark.readStream.format("leveret").option("url", url).option("queue", queue)
            .option("maxMessagesPerTrigger", per_trigger).load())


def test_stream_source_to_sink_with_checkpoint(spark, broker, qname, tmp_path):
    url, n = broker.url, 3000
    fill(url, qname, range(n))
    bind_out(url, f"{qname}-x", f"{qname}-out")
    ck = str(tmp_path / "ck")

    def run() -> Any:
        df = source(spark, url, qname, 1000).selectExpr("body", "message_id",
                                                        "'out' AS routing_key")
        query = (df.writeStream.format("leveret").option("url", url)
                 .option("exchange", f"{qname}-x").option("routingKeyColumn", "routing_key")
                 .option("checkpointLocation", ck).trigger(availableNow=True).start())
        query.awaitTermination()
        return query

    query = run()
    assert sum(p["numInputRows"] for p in query.recentProgress) == n
    assert len([p for p in query.recentProgress if p["numInputRows"]]) >= 3  # 1000 per trigger
    fill(url, qname, range(n, n + 500))
    run()  # same checkpoint: only the new messages
    assert depth(url, qname) == 0
    got = take_all(url, f"{qname}-out")
    ids = Counter(m["message_id"] for m in got)
    assert len(got) == n + 500 and set(ids) == {f"m{i}" for i in range(n + 500)}
    assert all(m["delivery_mode"] == 2 for m in got)
    assert {m["body"] for m in got if m["message_id"] == "m7"} == {b"payload 7"}


def test_numeric_headers_survive_a_round_trip_as_json(spark, broker, qname, tmp_path):
    url, n = broker.url, 200
    headers = {"attempt": 3, "score": 0.25, "ok": True, "who": "me", "tags": ["a", 1]}
    with Connection(url) as conn:
        conn.queue_declare(qname)
        conn.confirm_select()
        for i in range(n):
            raw = wire.encode_properties({"delivery_mode": 2, "message_id": f"m{i}",
                                          "headers": {**headers, "i": i}})
            conn.publish("", qname, raw, b"x")
        conn.wait_window(0)
    bind_out(url, f"{qname}-x", f"{qname}-out")
    df = (spark.readStream.format("leveret").option("url", url).option("queue", qname)
          .option("headersAsJson", "true").load()
          .selectExpr("body", "message_id", "'out' AS routing_key", "headers",
                      "get_json_object(headers, '$.i') + 1 AS next_i"))
    (df.writeStream.format("leveret").option("url", url).option("exchange", f"{qname}-x")
     .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start()
     .awaitTermination())
    got = take_all(url, f"{qname}-out")
    assert len(got) == n
    assert all(m["headers"] == {**headers, "i": int(m["message_id"][1:])} for m in got)


def test_failure_mid_stream_then_restart_loses_nothing(spark, broker, qname, tmp_path):
    """The sink writes batch 2, then the query dies before Spark commits it."""
    url, n = broker.url, 3000
    fill(url, qname, range(n))
    bind_out(url, f"{qname}-x", f"{qname}-out")
    ck = str(tmp_path / "ck")
    publish = publisher(url, exchange=f"{qname}-x")

    def crash_after_batch_2(df: Any, batch_id: int) -> None:
        publish(df, batch_id)
        if batch_id == 2:
            raise RuntimeError("injected failure after the write, before the commit")

    def start(fn: Any) -> Any:
        df = source(spark, url, qname, 500).selectExpr(
            "body", "message_id", "'out' AS routing_key",
            "map('src_redelivered', CAST(redelivered AS STRING)) AS headers")
        return (df.writeStream.foreachBatch(fn).option("checkpointLocation", ck)
                .trigger(availableNow=True).start())

    with pytest.raises(Exception, match="injected failure"):
        start(crash_after_batch_2).awaitTermination()
    first = Counter(m["message_id"] for m in take_all(url, f"{qname}-out"))
    assert sum(first.values()) == len(first) == 1500  # batches 0, 1 and 2 were published
    # Batches 0-1 were acked; batch 2 and everything prefetched goes back to the queue.
    assert wait_for(lambda: depth(url, qname) == n - 1000)

    start(publish).awaitTermination()  # restart on the same checkpoint: replays batch 2
    assert depth(url, qname) == 0
    rest = take_all(url, f"{qname}-out")
    second = Counter(m["message_id"] for m in rest)
    assert set(first) | set(second) == {f"m{i}" for i in range(n)}  # nothing lost
    assert sum(second.values()) == len(second) == n - 1000  # batch 2 again, then the rest, once
    duplicates = set(first) & set(second)
    assert len(duplicates) == 500  # the replayed batch's worth
    redelivered = {m["message_id"] for m in rest if m["headers"]["src_redelivered"] == "true"}
    assert duplicates <= redelivered  # duplicates only of redelivered messages


def test_stopped_processing_time_query_restarts_without_loss(spark, broker, qname, tmp_path):
    url, n = broker.url, 2000
    with Connection(url) as conn:
        conn.queue_declare(qname)
    bind_out(url, f"{qname}-x", f"{qname}-out")
    ck = str(tmp_path / "ck")

    def start(trigger: dict) -> Any:
        df = source(spark, url, qname, 300).selectExpr("body", "message_id",
                                                       "'out' AS routing_key")
        return (df.writeStream.format("leveret").option("url", url)
                .option("exchange", f"{qname}-x").option("checkpointLocation", ck)
                .trigger(**trigger).start())

    query = start({"processingTime": "200 milliseconds"})
    producer = threading.Thread(target=fill, args=(url, qname, range(n)))
    producer.start()
    deadline = time.monotonic() + 60
    while depth(url, f"{qname}-out") < 600 and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()  # mid-stream, possibly mid-batch
    producer.join()
    start({"availableNow": True}).awaitTermination()
    got = Counter(m["message_id"] for m in take_all(url, f"{qname}-out"))
    assert set(got) == {f"m{i}" for i in range(n)}
    assert depth(url, qname) == 0
    duplicates = sum(got.values()) - n
    assert duplicates <= 300 * 2  # at most the batches in flight when the query stopped


DRIVER_SCRIPT = """
import os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
from pyspark.sql import SparkSession
from leveret.spark_sink import register
url, queue, exchange, ck = sys.argv[1:5]
spark = (SparkSession.builder.master("local[2]").config("spark.driver.memory", "512m")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .getOrCreate())
register(spark)
df = (spark.readStream.format("leveret").option("url", url).option("queue", queue)
      .option("maxMessagesPerTrigger", 200).load()
      .selectExpr("body", "message_id", "'out' AS routing_key",
                  "map('src_redelivered', CAST(redelivered AS STRING)) AS headers"))
(df.writeStream.format("leveret").option("url", url).option("exchange", exchange)
   .option("checkpointLocation", ck).trigger(processingTime="100 milliseconds")
   .start().awaitTermination())
"""


def test_killed_driver_then_restart_loses_nothing(spark, broker, qname, tmp_path):
    """SIGKILL the whole driver (JVM and Python workers) mid-stream, restart on its checkpoint."""
    url, n = broker.url, 3000
    fill(url, qname, range(n))
    bind_out(url, f"{qname}-x", f"{qname}-out")
    ck = str(tmp_path / "ck")
    log = open(tmp_path / "driver.log", "wb")
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER_SCRIPT, url, qname, f"{qname}-x", ck],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        # Until the driver has relayed a fifth of the backlog, or has died (then fail at once).
        wait_for(lambda: driver.poll() is not None or depth(url, f"{qname}-out") >= 600,
                 timeout=600)
        assert driver.poll() is None and depth(url, f"{qname}-out") >= 600, (
            tmp_path / "driver.log").read_text(errors="replace")[-3000:]
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
        log.close()
    assert wait_for(lambda: depth(url, qname) + depth(url, f"{qname}-out") >= n)

    df = source(spark, url, qname, 1000).selectExpr(
        "body", "message_id", "'out' AS routing_key",
        "map('src_redelivered', CAST(redelivered AS STRING)) AS headers")
    (df.writeStream.format("leveret").option("url", url).option("exchange", f"{qname}-x")
     .option("checkpointLocation", ck).trigger(availableNow=True).start().awaitTermination())
    assert depth(url, qname) == 0
    got = take_all(url, f"{qname}-out")
    ids = Counter(m["message_id"] for m in got)
    assert set(ids) == {f"m{i}" for i in range(n)}  # nothing lost
    twice = {i for i, c in ids.items() if c > 1}
    redelivered = {m["message_id"] for m in got if m["headers"]["src_redelivered"] == "true"}
    assert twice <= redelivered  # duplicates only of messages the broker redelivered
    assert len(got) - n <= 3 * 200  # at most the batches unacked when the driver died


def test_batch_write_then_batch_read(spark, broker, qname, tmp_path):
    url = broker.url
    bind_out(url, f"{qname}-x", qname)
    rows = [(f"row {i}".encode(), "out", "text/plain") for i in range(1000)]
    df = spark.createDataFrame(rows, "body binary, routing_key string, content_type string")
    df.repartition(2).write.format("leveret").mode("append").option("url", url) \
        .option("exchange", f"{qname}-x").option("messageIdPrefix", "job-").save()
    assert depth(url, qname) == 1000

    read = spark.read.format("leveret").option("url", url).option("queue", qname).load()
    got = read.select("body", "message_id", "content_type", "routing_key").collect()
    assert sorted(r.body for r in got) == sorted(r[0] for r in rows)
    assert {r.content_type for r in got} == {"text/plain"} and {r.routing_key for r in got} == {
        "out"}
    assert len({r.message_id for r in got}) == 1000
    assert all(r.message_id.startswith("job-") for r in got)
    assert depth(url, qname) == 1000  # a batch read only looks

    consumed = (spark.read.format("leveret").option("url", url).option("queue", qname)
                .option("consume", "true").load().count())
    assert consumed == 1000 and depth(url, qname) == 0

    with pytest.raises(Exception, match="needs a 'body' column"):
        spark.range(3).write.format("leveret").mode("append").option("url", url).save()


def test_a_declared_schema_reads_only_its_columns(spark, broker, qname, tmp_path):
    """``.schema(...)`` on the source picks columns, in the user's order; a column the
    format has not, or a type it does not give, is a clear error before anything is read."""
    url, n = broker.url, 300
    fill(url, qname, range(n))
    df = (spark.readStream.format("leveret").schema("message_id string, body binary")
          .option("url", url).option("queue", qname).load())
    assert df.columns == ["message_id", "body"]
    (df.writeStream.format("memory").queryName("declared_schema")
     .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start()
     .awaitTermination())
    got = spark.sql("SELECT * FROM declared_schema").collect()
    assert sorted((r.message_id, r.body) for r in got) == sorted(
        (f"m{i}", f"payload {i}".encode()) for i in range(n))
    assert depth(url, qname) == 0

    fill(url, qname, range(3))
    for ddl, message in (("body binary, colour string", "has no column 'colour'"),
                         ("body string", "'body' is binary, not string")):
        with pytest.raises(Exception, match=message):
            spark.read.format("leveret").schema(ddl).option("url", url).option(
                "queue", qname).load().collect()
    assert depth(url, qname) == 3  # nothing was taken


def test_stream_queue_read_by_offset_replays_from_the_checkpoint(spark, broker, qname, tmp_path):
    """A stream read by offset into a file sink: exactly once across a stop, nothing consumed."""
    url, half, stream = broker.url, 1500, {"x-queue-type": "stream"}
    fill(url, qname, range(half), arguments=stream)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")

    def start() -> Any:
        df = (spark.readStream.format("leveret").option("url", url).option("queue", qname)
              .option("stream", "true").option("maxMessagesPerTrigger", 200).load()
              .selectExpr("seq", "message_id"))
        return (df.writeStream.format("parquet").option("path", out)
                .option("checkpointLocation", ck).trigger(processingTime="100 milliseconds")
                .start())

    query = start()
    query.processAllAvailable()
    assert spark.read.parquet(out).count() == half
    fill(url, qname, range(half, 2 * half), arguments=stream)
    query.stop()  # while the second half arrives: anywhere, possibly mid-batch
    query = start()
    query.processAllAvailable()
    query.stop()
    got = spark.read.parquet(out).collect()
    assert sorted(r["seq"] for r in got) == list(range(2 * half))  # each offset exactly once
    assert {r["message_id"] for r in got} == {f"m{i}" for i in range(2 * half)}
    assert depth(url, qname) == 2 * half  # nothing acked away

    # A second, independent query reads the whole stream from its own start, then stops.
    other = (spark.readStream.format("leveret").option("url", url).option("queue", qname)
             .option("stream", "true").load().selectExpr("seq")
             .writeStream.format("memory").queryName(f"t{qname[-8:]}")
             .option("checkpointLocation", str(tmp_path / "ck2"))
             .trigger(availableNow=True).start())
    other.awaitTermination()
    seqs = [r["seq"] for r in spark.sql(f"SELECT seq FROM t{qname[-8:]}").collect()]
    assert sorted(seqs) == list(range(2 * half))
    batch = (spark.read.format("leveret").option("url", url).option("queue", qname)
             .option("stream", "true").option("startingOffset", half).load())
    assert sorted(r["seq"] for r in batch.select("seq").collect()) == list(range(half, 2 * half))
    none = (spark.read.format("leveret").option("url", url).option("queue", qname)
            .option("stream", "true").option("streamFilter", "no-such-value").load())
    assert none.count() == 0  # no message carries x-stream-filter-value: none matches
