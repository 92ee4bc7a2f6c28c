"""Spark bridge throughput: queue -> Spark -> exchange, and each half alone, Leveret vs RabbitMQ.

    python bench/spark_bench.py                   # a Leveret started by the bench, 100,000 x 1 KB
    python bench/spark_bench.py --rabbit amqp://guest:guest@127.0.0.1:5672/%2F --repeat 2
    python bench/spark_bench.py --url amqp://...  # an already running broker instead of our own

Scenarios (one ``local[2]`` SparkSession, 2 GB driver (``--driver-memory``), UI off; every
broker gets the same ones, in the same run, through the same bridge):

* ``sink``: a cached DataFrame of ``--rows`` rows with a 1 KB ``body`` is written with
  ``df.write.format("leveret")`` into a direct exchange bound to a durable queue: persistent
  messages, publisher confirms, ``--partitions`` tasks. Timed from ``save()`` to its return,
  i.e. until every message is confirmed.
* ``source``: that queue is read by ``readStream.format("leveret")`` with
  ``maxMessagesPerTrigger=--source-per-trigger``, ``availableNow``, into Spark's ``noop`` sink.
* ``broker``: no Spark, the broker's own ceiling for the same messages: one Python process
  publishes ``--rows`` persistent 1 KB messages with confirms (window 4,000) through the
  bridge's client, then consumes them (prefetch 20,000, acks every 1,000). What is left
  between these and the Spark figures is the bridge's and Spark's cost.
* ``relay-<n>``: no Spark, what the broker does in ``e2e-<n>`` and at what rate it can: one
  Python process consumes ``n`` messages at a time (raw, prefetch ``n``), republishes each
  into the exchange with confirms (persistent, a new ``message_id``), and acks the ``n`` once
  they are all confirmed, as the bridge does after Spark's commit. Its ``broker`` CPU per
  row is the broker's share of the pipeline; the rate is the pipeline's ceiling with Spark
  costing nothing.
* ``rowcost``: no Spark, the bridge's own Python cost per row, as CPU time of this process
  (so less sensitive to other load than the rates): encoding and publishing ``--rows`` rows
  with ``publish_batches``, the driver's drain (socket to deliveries), splitting into
  partitions, pickling and unpickling them (Spark ships them to the executors so), and the
  executor's conversion to Arrow of the columns e2e's source declares (``--source-schema``).
  Needs no Spark: ``--scenarios rowcost relay`` starts no JVM.
* ``cold``: a fresh session in a child process (JVM up and one job run, no Python worker
  started yet), the first query's figures at the first ``--per-trigger``.
* ``e2e-<n>``: the pipeline a user runs: the queue, filled by an untimed sink
  write, is read with ``maxMessagesPerTrigger=n`` through a ``select`` into the ``leveret``
  sink (exchange bound to a second durable queue), ``availableNow``, with a checkpoint. Run at
  each ``--per-trigger`` value with ``max(--rows, 3 * n)`` rows.

Streaming figures come from Spark's own progress reports (``query.recentProgress``):
``first_batch_s`` is from ``start()`` to the end of the first trigger (its ``timestamp`` plus
``triggerExecution``), ``steady_rows_per_s`` is rows / trigger time over the batches after the
first, ``overall_rows_per_s`` is every row over ``start()`` to ``awaitTermination()``, and
``phases_ms`` is the median of each ``durationMs`` phase over those later batches
(``latestOffset`` + ``getBatch`` + ``queryPlanning`` + ``walCommit`` + ``commitOffsets`` is
the planning overhead, ``addBatch`` runs the tasks), and ``overlap`` is, over those later
batches and sampled every 0.1 s, the share of the time the broker worked alone (Spark waits
for confirms or deliveries), Spark alone (the broker waits), both, or neither.
``cpu_us_per_row`` is each role's CPU over the whole query, ``steady_cpu_us_per_row`` over
those later batches only (without the query's start: the source runner's imports, the
first batch's planning). Every count is checked on the broker: rows in = rows out, nothing
left behind.

Each scenario runs ``--repeat`` times, brokers alternating (A B A B); the summary table is of
medians. The broker runs on the same cores as Spark, so figures are end to end on one
machine, not the bridge alone. The full results print as one JSON line at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_sampler import CpuSampler, cpu_in_windows, overlap_shares  # bench/ is not a package
from relay_workload import declare_queues, fill_with_client, relay

from leveret.node import ready_file

NO_SPARK = ("broker", "rowcost", "relay")  # scenarios (by name before any "-<n>") without Spark
PLANNING_PHASES = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "commitOffsets")


def start_broker(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    log, ready = data_dir / "broker.log", data_dir / "ready.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port", "0",
         "--management-host", "127.0.0.1", "--management-port", "0", "--prometheus-port", "0",
         "--data-dir", str(data_dir / "data"), "--ready-file", str(ready)],
        stdout=open(log, "wb"), stderr=subprocess.STDOUT,
    )
    document = ready_file.wait(ready, proc, 120)
    if document is not None:
        return proc, f"amqp://guest:guest@127.0.0.1:{document['amqp']}/%2F"
    proc.kill()
    raise SystemExit(f"broker did not start:\n{log.read_text(errors='replace')}")


@contextlib.contextmanager
def profiled(directory: str | None, name: str) -> Iterator[None]:
    """With ``--py-spy DIR``: record every process of the run (this one, Spark's, the broker),
    holding the GIL, as py-spy's raw stacks in ``DIR/<name>.txt``."""
    if not directory:
        yield
        return
    out = Path(directory) / f"{name}.txt"
    spy = subprocess.Popen(["py-spy", "record", "--subprocesses", "--gil", "--rate", "100",
                            "--format", "raw", "--output", str(out), "--pid", str(os.getpid())],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attaches
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(60)


def _epoch(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def batches_of(progress: list[dict]) -> list[dict]:
    """The progress reports of batches that read rows (an ``availableNow`` query ends with
    an empty one)."""
    return [p for p in progress if p["numInputRows"]]


def window(batch: dict) -> tuple[float, float]:
    """A batch's trigger, as epoch seconds from its start to its end."""
    start = _epoch(batch["timestamp"])
    return start, start + batch["durationMs"]["triggerExecution"] / 1000


def stream_figures(started: float, finished: float, progress: list[dict]) -> dict[str, Any]:
    """First-batch time, steady rate and phase medians from Spark's progress reports."""
    batches = batches_of(progress)
    rows = sum(p["numInputRows"] for p in batches)
    out: dict[str, Any] = {"rows": rows, "batches": len(batches),
                           "overall_rows_per_s": round(rows / (finished - started))}
    if not batches:
        return out
    first = batches[0]
    out["first_batch_s"] = round(window(first)[1] - started, 2)
    out["first_batch_phases_ms"] = first["durationMs"]
    later = batches[1:]
    if later:
        trigger_s = sum(p["durationMs"]["triggerExecution"] for p in later) / 1000
        out["steady_rows_per_s"] = round(sum(p["numInputRows"] for p in later) / trigger_s)
        phases = sorted({k for p in later for k in p["durationMs"]})
        out["phases_ms"] = {
            k: statistics.median(p["durationMs"].get(k, 0) for p in later) for k in phases}
        out["planning_ms"] = statistics.median(
            sum(p["durationMs"].get(k, 0) for k in PLANNING_PHASES) for p in later)
    return out


class Bench:
    def __init__(self, spark: Any, args: argparse.Namespace, tmp: Path) -> None:
        from pyspark.sql import functions as F

        self.spark, self.args, self.tmp = spark, args, tmp
        self.F = F
        self.frames: dict[int, Any] = {}
        self.runs = 0

    def frame(self, rows: int) -> Any:
        if rows not in self.frames:
            F = self.F
            df = (
                self.spark.range(rows, numPartitions=self.args.partitions)
                .select(F.lit("bench").alias("routing_key"),
                        F.expr(f"cast(repeat('x', {self.args.size}) as binary)").alias("body"))
                .cache()
            )
            df.count()
            self.frames[rows] = df
        return self.frames[rows]

    def warm_workers(self) -> None:
        """Spark stops Python workers idle for a minute, and a new one imports PySpark from
        ``pyspark.zip`` (about 0.7 s of CPU): without this, whichever broker runs first after
        a pause pays for that inside its measured run."""
        parts = self.args.partitions
        self.spark.sparkContext.parallelize(range(parts), parts).map(lambda x: x).collect()

    def reset(self, url: str) -> None:
        declare_queues(url)

    def depth(self, url: str, queue: str) -> int:
        from leveret.spark_sink.amqp_client import Connection

        with Connection(url) as conn:
            return int(conn.queue_declare(queue, passive=True).message_count)

    def sink(self, url: str, rows: int) -> float:
        df = self.frame(rows)
        t0 = time.perf_counter()
        (df.write.format("leveret").mode("append").option("url", url)
         .option("exchange", "spark-bench-x").save())
        return time.perf_counter() - t0

    def stream(self, url: str, per_trigger: int, into_exchange: bool,
               partitions: int | None = None) -> dict[str, Any]:
        self.runs += 1
        partitions = partitions or self.args.source_partitions
        reader = self.spark.readStream.format("leveret")
        if into_exchange and self.args.source_schema:
            reader = reader.schema(self.args.source_schema)
        reader = (reader.option("url", url)
                  .option("queue", "spark-bench").option("maxMessagesPerTrigger", per_trigger))
        if partitions:
            reader = reader.option("numPartitions", partitions)
        df = reader.load()
        if into_exchange:
            writer = (df.select("body", "message_id", self.F.lit("out").alias("routing_key"))
                      .writeStream.format("leveret").option("url", url)
                      .option("exchange", "spark-bench-x"))
        else:
            writer = df.writeStream.format("noop")
        with CpuSampler(0.1) as cpu, profiled(self.args.py_spy, f"stream{self.runs}"):
            started = time.time()
            query = (writer.option("checkpointLocation", str(self.tmp / f"ck{self.runs}"))
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            finished = time.time()
        out = stream_figures(started, finished, query.recentProgress)
        if out["rows"]:
            out["cpu_us_per_row"] = {role: round(s / out["rows"] * 1e6, 1)
                                     for role, s in sorted(cpu.by_role().items()) if s > 0}
            out["cpu_busy_cores"] = round(sum(cpu.by_role().values()) / cpu.wall, 2)
            later = batches_of(query.recentProgress)[1:]
            windows = [window(p) for p in later]
            out["overlap"] = overlap_shares(cpu.timeline, windows)
            later_rows = sum(p["numInputRows"] for p in later)
            if later_rows:
                out["steady_cpu_us_per_row"] = {
                    role: round(s / later_rows * 1e6, 1)
                    for role, s in sorted(cpu_in_windows(cpu.timeline, windows).items()) if s > 0}
        return out

    def run_sink(self, url: str) -> dict[str, Any]:
        rows = self.args.rows
        self.reset(url)
        with CpuSampler() as cpu:
            seconds = self.sink(url, rows)
        queued = self.depth(url, "spark-bench")
        assert queued == rows, f"sink: {queued} queued of {rows}"
        return {"rows": rows, "rows_per_s": round(rows / seconds), "seconds": round(seconds, 2),
                "cpu_us_per_row": {role: round(s / rows * 1e6, 1)
                                   for role, s in sorted(cpu.by_role().items()) if s > 0}}

    def run_source(self, url: str) -> dict[str, Any]:
        rows = self.args.rows
        self.reset(url)
        self.sink(url, rows)
        out = self.stream(url, self.args.source_per_trigger, into_exchange=False)
        assert out["rows"] == rows and self.depth(url, "spark-bench") == 0, out
        return out

    def run_broker(self, url: str) -> dict[str, Any]:
        from leveret.spark_sink.amqp_client import Connection

        rows = self.args.rows
        self.reset(url)
        t0 = time.perf_counter()
        fill_with_client(url, rows, self.args.size)
        publish_s = time.perf_counter() - t0
        got = 0
        t0 = time.perf_counter()
        with Connection(url) as conn:
            conn.qos(20000)
            conn.consume("spark-bench")
            last = 0
            while got < rows and (conn.deliveries or conn.pump(5)):
                while conn.deliveries:
                    last = conn.deliveries.popleft().delivery_tag
                    got += 1
                    if got % 1000 == 0:
                        conn.ack(last)
            conn.ack(last)
        consume_s = time.perf_counter() - t0
        assert got == rows, got
        return {"rows": rows, "publish_rows_per_s": round(rows / publish_s),
                "consume_rows_per_s": round(rows / consume_s)}

    def run_relay(self, url: str, per_trigger: int) -> dict[str, Any]:
        rows = max(self.args.rows, 3 * per_trigger)
        self.reset(url)
        fill_with_client(url, rows, self.args.size)
        with CpuSampler() as cpu:
            t0 = time.perf_counter()
            relay(url, rows, per_trigger, self.args.size)
            seconds = time.perf_counter() - t0
        assert self.depth(url, "spark-bench-out") == rows and self.depth(url, "spark-bench") == 0
        return {"rows": rows, "rows_per_s": round(rows / seconds),
                "cpu_us_per_row": {role: round(s / rows * 1e6, 1)
                                   for role, s in sorted(cpu.by_role().items()) if s > 0}}

    def run_rowcost(self, url: str) -> dict[str, Any]:
        import pickle

        import pyarrow as pa

        from leveret.spark_sink.amqp_client import Connection
        from leveret.spark_sink.publisher import ConnectionPool, PublishOptions, publish_batches
        from leveret.spark_sink.schema import Layout
        from leveret.spark_sink.source import read_partition, split

        rows = self.args.rows
        self.reset(url)
        out: dict[str, Any] = {"rows": rows}

        def cpu_us(key: str, fn: Any) -> Any:
            t0 = time.process_time()
            result = fn()
            out[key] = round((time.process_time() - t0) / rows * 1e6, 2)
            return result

        batch = pa.RecordBatch.from_pydict({
            "body": pa.array([b"x" * self.args.size] * rows, pa.binary()),
            "routing_key": pa.array(["bench"] * rows)})
        pool = ConnectionPool()
        opts = PublishOptions(url=url, exchange="spark-bench-x")
        cpu_us("publish_us", lambda: publish_batches([batch], opts, "rc-", pool))
        pool.close_all()
        with Connection(url, raw_deliveries=True) as conn:
            conn.qos(min(rows, 65535))
            conn.consume("spark-bench")
            got: list[Any] = []

            def drain() -> None:
                while len(got) < rows and (conn.raw or conn.pump(10)):
                    while conn.raw:
                        got.append(conn.raw.popleft())

            cpu_us("drain_us", drain)
            delivered = [frames for _tag, frames in got]
            fields = [tuple(f.split()) for f in self.args.source_schema.split(",") if f.strip()]
            layout = Layout.of(fields or None, False)  # what e2e's source decodes
            parts = cpu_us("split_us", lambda: split(range(len(delivered)), delivered,
                                                      self.args.partitions, layout))
            blob = cpu_us("pickle_us", lambda: pickle.dumps(parts))
            parts = cpu_us("unpickle_us", lambda: pickle.loads(blob))
            cpu_us("to_arrow_us", lambda: [b for p in parts for b in read_partition(p)])
            conn.ack(got[-1][0])
        out["bridge_us"] = round(sum(v for k, v in out.items() if k.endswith("_us")), 2)
        return out

    def run_e2e(self, url: str, per_trigger: int) -> dict[str, Any]:
        rows = max(self.args.rows, 3 * per_trigger)
        self.reset(url)
        self.sink(url, rows)
        out = self.stream(url, per_trigger, into_exchange=True)
        published = self.depth(url, "spark-bench-out")
        assert out["rows"] == rows and published == rows, (out, published)
        assert self.depth(url, "spark-bench") == 0
        return out


def cold_first_batch(args: argparse.Namespace, url: str, daemon: str | None = None
                     ) -> dict[str, Any]:
    """In a child process: JVM up, no Python worker yet; the first query's first batch."""
    out = subprocess.run(
        [sys.executable, __file__, "--cold-child", url, "--rows", str(args.cold_rows),
         "--size", str(args.size), "--per-trigger", str(args.per_trigger[0]),
         *(["--daemon-module", daemon] if daemon else [])],
        capture_output=True, text=True, timeout=600,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        raise SystemExit(f"cold run failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return dict(json.loads(lines[-1]))


def spark_session(driver_memory: str, daemon_module: str | None = None,
                  conf: Sequence[str] = ()) -> Any:
    """The benches' Spark: ``local[2]``, no UI, ``conf`` as ``KEY=VALUE`` settings."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]").appName("leveret-spark-bench")
        .config("spark.driver.memory", driver_memory).config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
    )
    if daemon_module:
        builder = builder.config("spark.python.daemon.module", daemon_module)
    for setting in conf:
        key, _, value = setting.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def cold_child(args: argparse.Namespace, make_session: Any) -> None:
    url = args.cold_child
    spark = make_session()
    spark.range(10).count()  # the JVM is up and has run a job; no Python worker has started
    from leveret.spark_sink import register

    register(spark)
    tmp = Path(tempfile.mkdtemp(prefix="leveret-spark-cold-"))
    bench = Bench(spark, args, tmp)
    bench.reset(url)
    fill_with_client(url, args.cold_rows, args.size)
    out = bench.stream(url, args.per_trigger[0], into_exchange=True)
    assert bench.depth(url, "spark-bench-out") == args.cold_rows, out
    bench.reset(url)
    spark.stop()
    print(json.dumps(out))


def headline(result: dict[str, Any]) -> str:
    text = _headline(result)
    if "cpu_us_per_row" in result:
        text += "; CPU us/row " + ", ".join(
            f"{role.split(' (')[0]} {us}" for role, us in result["cpu_us_per_row"].items())
    if "steady_cpu_us_per_row" in result:
        text += "; later batches' CPU us/row " + ", ".join(
            f"{role.split(' (')[0]} {us}" for role, us in result["steady_cpu_us_per_row"].items())
    if result.get("overlap"):
        text += "; later batches: " + ", ".join(
            f"{name} {share:.0%}" for name, share in result["overlap"].items())
    return text


def _headline(result: dict[str, Any]) -> str:
    if "bridge_us" in result:
        return ", ".join(f"{k} {v}" for k, v in result.items() if k.endswith("_us")) + " (CPU us/row)"
    if "publish_rows_per_s" in result:
        return (f"publish {result['publish_rows_per_s']:,} rows/s, "
                f"consume {result['consume_rows_per_s']:,} rows/s")
    if "rows_per_s" in result:
        return f"{result['rows_per_s']:,} rows/s"
    return (f"first {result.get('first_batch_s', '-')} s, steady "
            f"{result.get('steady_rows_per_s', 0):,} rows/s, planning "
            f"{result.get('planning_ms', '-')} ms/batch")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--per-trigger", type=int, nargs="+", default=[5000, 50000])
    parser.add_argument("--source-per-trigger", type=int, default=50000)
    parser.add_argument("--source-partitions", type=int,
                        help="the source's numPartitions (default: the source's default, 2)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--scenarios", nargs="+", default=["cold", "broker", "relay", "rowcost", "sink", "source", "e2e"])
    parser.add_argument("--warmup", type=int, default=50_000,
                        help="rows for the untimed warm-up (the sink and the pipeline, each broker)")
    parser.add_argument("--url", help="use this broker instead of starting a Leveret")
    parser.add_argument("--rabbit", help="also run every scenario against this RabbitMQ")
    parser.add_argument("--cold-rows", type=int, default=20_000)
    parser.add_argument("--cold-child", help=argparse.SUPPRESS)
    parser.add_argument("--source-schema", default="body binary, message_id string",
                        help="the schema e2e declares on its source (only the columns it "
                             "uses); '' for the source's own, every column")
    parser.add_argument("--py-spy", metavar="DIR",
                        help="record each streaming run with py-spy (raw stacks) into DIR")
    parser.add_argument("--daemon-module", help="spark.python.daemon.module for the session")
    parser.add_argument("--driver-memory", default="2g",
                        help="spark.driver.memory: a batch's messages pass through the driver's "
                             "heap several times (1g ran out at 50,000 1 KB rows per trigger)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the session (repeatable)")
    args = parser.parse_args()

    from leveret.spark_sink import register

    def session() -> Any:
        return spark_session(args.driver_memory, args.daemon_module, args.conf)

    if args.cold_child:
        cold_child(args, session)
        return

    tmp = Path(tempfile.mkdtemp(prefix="leveret-spark-bench-"))
    broker = None
    url = args.url
    if url is None:
        broker, url = start_broker(tmp)
    brokers = {"leveret": url}
    if args.rabbit:
        brokers["rabbitmq"] = args.rabbit
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    try:
        if "cold" in args.scenarios:
            for _ in range(args.repeat):
                for name, burl in brokers.items():
                    result = cold_first_batch(args, burl, args.daemon_module)
                    results.setdefault("cold", {}).setdefault(name, []).append(result)
                    print(f"{'cold':>10} {name:>9}: {headline(result)}", flush=True)
        # Scenarios without Spark alone (``--scenarios rowcost relay``) start no JVM.
        with_spark = any(name.split("-")[0] not in NO_SPARK for name in args.scenarios)
        spark = session() if with_spark else None
        if spark is not None:
            register(spark)
        bench = Bench(spark, args, tmp)
        # Warm-up: starts the JVM paths and Spark's Python workers (a user's JVM is up too),
        # as many as the measured runs use (a small batch alone would run as one task).
        # Each broker relays the warm-up rows once without Spark too: a just-started broker
        # (and RabbitMQ's schedulers) ran its first measured repeat slower than the second.
        for burl in brokers.values():
            bench.reset(burl)
            if spark is not None:
                bench.sink(burl, args.warmup)
                bench.stream(burl, args.warmup, into_exchange=True, partitions=args.partitions)
                bench.reset(burl)
            fill_with_client(burl, args.warmup, args.size)
            relay(burl, args.warmup, args.warmup, args.size)
        plan: list[tuple[str, Any]] = []
        if "broker" in args.scenarios:
            plan.append(("broker", bench.run_broker))
        if "relay" in args.scenarios:
            for n in args.per_trigger:
                plan.append((f"relay-{n}", lambda u, n=n: bench.run_relay(u, n)))
        if "rowcost" in args.scenarios:
            plan.append(("rowcost", bench.run_rowcost))
        if "sink" in args.scenarios:
            plan.append(("sink", bench.run_sink))
        if "source" in args.scenarios:
            plan.append(("source", bench.run_source))
        if "e2e" in args.scenarios:
            for n in args.per_trigger:
                plan.append((f"e2e-{n}", lambda u, n=n: bench.run_e2e(u, n)))
        for repeat in range(args.repeat):
            # The JVM keeps compiling hot paths for many batches after the warm-up, so the
            # broker measured first paid for more of it: its sink-alone JVM CPU was 31 us a
            # row against RabbitMQ's 5 right after it. Alternate who goes first.
            order = list(brokers.items())[::-1 if repeat % 2 else 1]
            for scenario, run in plan:
                for name, burl in order:
                    if scenario.split("-")[0] not in NO_SPARK:
                        bench.warm_workers()
                    result = run(burl)
                    results.setdefault(scenario, {}).setdefault(name, []).append(result)
                    print(f"{scenario:>10} {name:>9}: {headline(result)}", flush=True)
        for burl in brokers.values():
            bench.reset(burl)
        if spark is not None:
            spark.stop()
    finally:
        if broker is not None:
            broker.terminate()
            broker.wait(15)

    print("\nmedians over", args.repeat, "run(s):")
    for scenario, by_broker in results.items():
        for name, runs in by_broker.items():
            med = {k: statistics.median(r[k] for r in runs)
                   for k in ("bridge_us", "publish_us", "drain_us", "to_arrow_us",
                             "publish_rows_per_s", "consume_rows_per_s", "rows_per_s", "first_batch_s", "steady_rows_per_s",
                             "overall_rows_per_s", "planning_ms")
                   if all(k in r for r in runs)}
            roles = sorted({k for r in runs for k in r.get("cpu_us_per_row", {})})
            if roles:
                med["cpu_us_per_row"] = {k: statistics.median(
                    r.get("cpu_us_per_row", {}).get(k, 0) for r in runs) for k in roles}
            if all(r.get("overlap") for r in runs):
                med["overlap"] = {k: statistics.median(r["overlap"][k] for r in runs)
                                  for k in runs[0]["overlap"]}
            print(f"{scenario:>10} {name:>9}: {json.dumps(med)}")
    print(json.dumps({"rows": args.rows, "size": args.size, "partitions": args.partitions,
                      "results": results}))


if __name__ == "__main__":
    main()
