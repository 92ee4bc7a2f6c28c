"""Spark bridge throughput: rows/s into the broker through the sink, out through the source.

    python bench/spark_bench.py                       # starts its own Leveret, 200,000 x 1 KB
    python bench/spark_bench.py --rows 50000 --url amqp://guest:guest@127.0.0.1:5672/%2F

Scenarios (one local[2] SparkSession, 512 MB driver, UI off):

* ``sink``: a DataFrame of ``--rows`` rows with a 1 KB ``body`` (cached, so Spark's
  generation is not timed) is written with ``df.write.format("leveret")`` into a
  direct exchange bound to a durable queue: persistent messages, publisher
  confirms, ``--partitions`` tasks in parallel. Timed from ``save()`` to its
  return, i.e. until every message is confirmed.
* ``source``: the queue the sink filled is read by a streaming query
  (``readStream.format("leveret")``, ``trigger(availableNow=True)``,
  ``maxMessagesPerTrigger=--per-trigger``) into Spark's ``noop`` sink, with a
  checkpoint; acks follow Spark's commits. Timed from ``start()`` to the end of
  ``awaitTermination()``, so query start-up (~1-2 s) is included;
  ``source_rows_per_s_in_batches`` divides by the micro-batches' own time instead.

Both run after an untimed warm-up (``--warmup`` rows through the sink and the
source), which starts Spark's Python workers: a cold first batch costs 5-8 s.

The broker runs on the same 2 cores as Spark, so figures are end-to-end on a
shared machine, not the bridge alone. Results print as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LISTEN_RE = re.compile(r"listening for AMQP 0-9-1 on 127\.0\.0\.1:(\d+)")


def start_broker(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    log = data_dir / "broker.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port", "0",
         "--management-host", "127.0.0.1", "--management-port", "0", "--prometheus-port", "0",
         "--data-dir", str(data_dir / "data")],
        stdout=open(log, "wb"), stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        match = LISTEN_RE.search(log.read_text(errors="replace"))
        if match:
            return proc, f"amqp://guest:guest@127.0.0.1:{match.group(1)}/%2F"
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"broker did not start:\n{log.read_text(errors='replace')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--per-trigger", type=int, default=20_000)
    parser.add_argument("--warmup", type=int, default=5000, help="rows for the untimed warm-up")
    parser.add_argument("--url", help="use this broker instead of starting a Leveret")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from leveret.spark_sink import register
    from leveret.spark_sink.amqp_client import Connection

    tmp = Path(tempfile.mkdtemp(prefix="leveret-spark-bench-"))
    broker = None
    url = args.url
    if url is None:
        broker, url = start_broker(tmp)
    queue, exchange = "spark-bench", "spark-bench-x"
    try:
        with Connection(url) as conn:
            conn.exchange_declare(exchange)
            conn.queue_declare(queue)
            conn.queue_delete(queue)
            conn.queue_declare(queue)
            conn.queue_bind(queue, exchange, "bench")

        spark = (
            SparkSession.builder.master("local[2]").appName("leveret-spark-bench")
            .config("spark.driver.memory", "512m").config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2").getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)

        def frame(rows: int) -> object:
            df = (
                spark.range(rows, numPartitions=args.partitions)
                .select(F.lit("bench").alias("routing_key"),
                        F.expr(f"cast(repeat('x', {args.size}) as binary)").alias("body"))
                .cache()
            )
            df.count()
            return df

        def sink(df: object) -> float:
            t0 = time.perf_counter()
            (df.write.format("leveret").mode("append").option("url", url)  # type: ignore[attr-defined]
             .option("exchange", exchange).save())
            return time.perf_counter() - t0

        def source(name: str) -> tuple[float, int, list[dict]]:
            stream = (
                spark.readStream.format("leveret").option("url", url).option("queue", queue)
                .option("maxMessagesPerTrigger", args.per_trigger).load()
            )
            t0 = time.perf_counter()
            query = (stream.writeStream.format("noop")
                     .option("checkpointLocation", str(tmp / name))
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            elapsed = time.perf_counter() - t0
            return elapsed, sum(p["numInputRows"] for p in query.recentProgress), \
                query.recentProgress

        # Warm-up: starts the Python workers (Spark reuses them) and JITs the JVM paths.
        # A cold first micro-batch costs ~5-8 s here; that is start-up, not throughput.
        sink(frame(args.warmup))
        source("warmup")

        sink_s = sink(frame(args.rows))
        with Connection(url) as conn:
            in_queue = conn.queue_declare(queue, passive=True).message_count
        source_s, read, progress = source("ck")
        batch_s = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
        with Connection(url) as conn:
            left = conn.queue_declare(queue, passive=True).message_count
            conn.queue_delete(queue)
        spark.stop()
    finally:
        if broker is not None:
            broker.terminate()
            broker.wait(15)
    print(json.dumps({
        "rows": args.rows, "size": args.size, "partitions": args.partitions,
        "sink_rows_per_s": round(args.rows / sink_s), "sink_s": round(sink_s, 2),
        "queued_after_sink": in_queue,
        "source_rows_per_s": round(read / source_s), "source_s": round(source_s, 2),
        "source_rows": read, "left_in_queue": left,
        "source_rows_per_s_in_batches": round(read / batch_s) if batch_s else None,
        "source_batches": len([p for p in progress if p["numInputRows"]]),
        "broker": url if args.url else "leveret (started by the bench)",
    }))


if __name__ == "__main__":
    main()
