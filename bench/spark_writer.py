"""The Spark sink's partition writer without Spark: where a written row's time goes.

    python bench/spark_writer.py                          # 2 writers x 50,000 rows, 3 rounds
    python bench/spark_writer.py --writers 1 --rows 100000 --profile
    python bench/spark_writer.py --ids                    # rows with their own message_id
    python bench/spark_writer.py --url amqp://...         # an already running broker

Each writer is a process of its own, as Spark's tasks are, running what a sink task runs
(:func:`leveret.spark_sink.publisher.publish_batches`) on Arrow batches of
``--batch-rows`` rows shaped like ``spark_bench.py``'s sink DataFrame (a ``routing_key``
column and a 1 KB binary ``body``), into ``spark-bench-x`` bound to the durable queue
``spark-bench``: persistent messages with confirms, returning when all are confirmed. The
writers start together; a round is timed from their start to the last one's end.

Per round it prints the rate and the CPU a row of each part, from ``/proc``: the writers
(the sink's executor-side Python), the broker's event loop and the broker's other threads
(the group commit writing LMDB). The rate with Spark is bounded by these plus Spark's own
per-row cost (its JVM's, measured by ``spark_bench.py``'s ``cpu_us_per_row``), all on the
same cores. ``--profile`` prints the top of one writer's ``cProfile``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_proc import start_leveret  # bench/ is not a package
from relay_workload import declare_queues

CLK_TCK = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of ``pid`` by thread name (``loop`` for the main one)."""
    out: dict[str, float] = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{task}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        name = "loop" if int(task) == pid else "other threads"
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def child(url: str, rows: int, batch_rows: int, size: int, prefix: str, profile: bool,
          ids: bool) -> None:
    """One writer: build the batches, wait for the go line on stdin, publish, print CPU."""
    import pyarrow as pa

    from leveret.spark_sink.publisher import ConnectionPool, PublishOptions, publish_batches

    body = b"x" * size
    sizes = [n for n in [batch_rows] * (rows // batch_rows) + [rows % batch_rows] if n]
    batches = [pa.RecordBatch.from_pydict({
        "routing_key": pa.array(["bench"] * n), "body": pa.array([body] * n, pa.binary()),
        **({"message_id": pa.array([f"{prefix}{b}-{i}" for i in range(n)])} if ids else {})})
        for b, n in enumerate(sizes)]
    opts = PublishOptions(url=url, exchange="spark-bench-x").checked(batches[0].schema.names)
    pool = ConnectionPool()
    pool.give(url, pool.take(url))  # connected, as a reused Spark worker's pool is
    print("ready", flush=True)
    sys.stdin.readline()
    c0 = time.process_time()
    if profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(publish_batches, batches, opts, prefix, pool)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(14)
    else:
        publish_batches(batches, opts, prefix, pool)
    print(f"cpu {time.process_time() - c0}", flush=True)
    pool.close_all()


def one_round(url: str, broker_pid: int | None, args: argparse.Namespace, rnd: int
              ) -> dict[str, float]:
    per = args.rows // args.writers
    procs = [subprocess.Popen(
        [sys.executable, __file__, "--child", url, "--rows", str(per),
         "--batch-rows", str(args.batch_rows), "--size", str(args.size),
         "--prefix", f"r{rnd}-w{w}-", *(["--profile"] if args.profile and w == 0 else []),
         *(["--ids"] if args.ids else [])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for w in range(args.writers)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    b0 = thread_cpu(broker_pid) if broker_pid else {}
    t0 = time.perf_counter()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    client = 0.0
    for p in procs:
        assert p.stdout is not None
        client += float(p.stdout.readline().split()[1])
    seconds = time.perf_counter() - t0
    for p in procs:
        p.wait(60)
    rows = per * args.writers
    out = {"rows_per_s": rows / seconds, "writers_us": client / rows * 1e6}
    if broker_pid:
        b1 = thread_cpu(broker_pid)
        for name in ("loop", "other threads"):
            out[f"broker {name}_us"] = (b1.get(name, 0) - b0.get(name, 0)) / rows * 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="rows a round, all writers")
    parser.add_argument("--writers", type=int, default=2, help="processes, as Spark's tasks")
    parser.add_argument("--batch-rows", type=int, default=10_000,
                        help="rows per Arrow batch (Spark's arrow.maxRecordsPerBatch)")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile the first writer")
    parser.add_argument("--ids", action="store_true",
                        help="rows carry their own message_id (as e2e's source rows do)")
    parser.add_argument("--url", help="an already running broker (no broker CPU figures)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.rows, args.batch_rows, args.size, args.prefix, args.profile,
              args.ids)
        return
    proc = None
    url = args.url
    if url is None:
        proc, url, _ = start_leveret(Path(tempfile.mkdtemp(prefix="leveret-spark-writer-")))
    try:
        results = []
        for rnd in range(args.rounds):
            declare_queues(url)
            res = one_round(url, proc.pid if proc else None, args, rnd)
            results.append(res)
            print(f"round {rnd + 1}: {res['rows_per_s']:,.0f} rows/s; CPU us/row " + ", ".join(
                f"{k[:-3]} {v:.2f}" for k, v in res.items() if k.endswith("_us")), flush=True)
        print(f"median: {statistics.median(r['rows_per_s'] for r in results):,.0f} rows/s; "
              "CPU us/row " + ", ".join(
                  f"{k[:-3]} {statistics.median(r[k] for r in results):.2f}"
                  for k in results[0] if k.endswith("_us")))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
