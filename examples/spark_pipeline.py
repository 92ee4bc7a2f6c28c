"""A Spark pipeline between two queues: read events, enrich them, publish the result.

    python examples/spark_pipeline.py                 # starts its own Leveret broker
    python examples/spark_pipeline.py --url amqp://guest:guest@127.0.0.1:5672/%2F   # or any broker

What it does, step by step (see examples/README.md):

1. starts a Leveret broker in a temporary directory (unless ``--url`` is given);
2. declares queue ``orders``, a direct exchange ``enriched`` and a queue
   ``enriched-eu`` bound to it with routing key ``eu``, and ``enriched-us`` with ``us``;
3. publishes ``--orders`` JSON orders to ``orders`` with the bridge's client;
4. runs a streaming query: ``readStream.format("leveret")`` on ``orders``
   -> parse the JSON, add a ``total`` -> ``writeStream.format("leveret")`` into
   ``enriched``, routed by region, with a checkpoint, ``trigger(availableNow=True)``;
5. reads ``enriched-eu`` back with a batch read and prints a few rows and the counts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from leveret.node import ready_file


def start_broker(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``python -m leveret serve --port 0``; the port it got is in its ready file."""
    log, ready = workdir / "broker.log", workdir / "ready.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port", "0",
         "--management-host", "127.0.0.1", "--management-port", "0", "--prometheus-port", "0",
         "--data-dir", str(workdir / "data"), "--ready-file", str(ready)],
        stdout=open(log, "wb"), stderr=subprocess.STDOUT,
    )
    document = ready_file.wait(ready, proc, 120)
    if document is not None:
        return proc, f"amqp://guest:guest@127.0.0.1:{document['amqp']}/%2F"
    proc.kill()
    raise SystemExit(f"the broker did not start; its log:\n{log.read_text(errors='replace')}")


def publish_orders(url: str, count: int) -> None:
    from leveret.spark_sink import wire
    from leveret.spark_sink.amqp_client import Connection

    with Connection(url) as conn:
        conn.queue_declare("orders")
        conn.exchange_declare("enriched")
        for region in ("eu", "us"):
            conn.queue_declare(f"enriched-{region}")
            conn.queue_bind(f"enriched-{region}", "enriched", region)
        conn.confirm_select()
        for i in range(count):
            order = {"id": i, "region": "eu" if i % 3 else "us", "qty": 1 + i % 5, "price": 9.5}
            props = wire.encode_properties(
                {"delivery_mode": 2, "message_id": f"order-{i}", "content_type": "application/json"}
            )
            conn.publish("", "orders", props, json.dumps(order).encode())
            if conn.confirms and conn.confirms.outstanding > 1000:
                conn.wait_window(500)
        conn.wait_window(0)


def main() -> None:
    parser = argparse.ArgumentParser(description="Leveret -> Spark -> Leveret example pipeline")
    parser.add_argument("--url", help="an AMQP URL; default: start a Leveret broker here")
    parser.add_argument("--orders", type=int, default=10_000)
    args = parser.parse_args()

    # Spark's Python workers must run this interpreter (the one with leveret installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from leveret.spark_sink import register

    workdir = Path(tempfile.mkdtemp(prefix="leveret-example-"))
    broker, url = (None, args.url) if args.url else start_broker(workdir)
    print(f"broker: {url}")
    try:
        publish_orders(url, args.orders)
        print(f"published {args.orders} orders to queue 'orders'")

        spark = (
            SparkSession.builder.master("local[2]").appName("leveret-example")
            .config("spark.driver.memory", "512m").config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2").getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)

        orders = (
            spark.readStream.format("leveret").option("url", url).option("queue", "orders")
            .option("maxMessagesPerTrigger", 5000).load()
        )
        order = F.from_json(F.col("body").cast("string"),
                            "id long, region string, qty int, price double")
        enriched = (
            orders.select("message_id", order.alias("o"))
            .select(
                F.col("o.region").alias("routing_key"),  # routes to enriched-eu / enriched-us
                F.to_json(F.struct("o.*", (F.col("o.qty") * F.col("o.price")).alias("total")))
                .cast("binary").alias("body"),
                "message_id",  # carried through: consumers can deduplicate
                F.lit("application/json").alias("content_type"),
            )
        )
        query = (
            enriched.writeStream.format("leveret").option("url", url)
            .option("exchange", "enriched").option("routingKeyColumn", "routing_key")
            .option("checkpointLocation", str(workdir / "checkpoint"))
            .trigger(availableNow=True).start()
        )
        query.awaitTermination()
        batches = [p for p in query.recentProgress if p["numInputRows"]]
        print(f"streamed {sum(p['numInputRows'] for p in batches)} orders "
              f"in {len(batches)} micro-batches")

        eu = spark.read.format("leveret").option("url", url).option("queue", "enriched-eu").load()
        print("a few enriched orders from queue 'enriched-eu':")
        for row in eu.select("message_id", F.col("body").cast("string").alias("body")).limit(3) \
                .collect():
            print(f"  {row.message_id}: {row.body}")
        us = spark.read.format("leveret").option("url", url).option("queue", "enriched-us").load()
        print(f"enriched-eu holds {eu.count()} messages, enriched-us holds {us.count()}")
        spark.stop()
    finally:
        if broker is not None:
            broker.terminate()
            broker.wait(15)


if __name__ == "__main__":
    main()
