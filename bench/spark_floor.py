"""Spark's own floor for the bridge's pipeline: the e2e query with no broker and no AMQP.

The same shape as ``spark_bench.py``'s e2e scenario (a Python streaming data source,
``select body, message_id, lit("out")``, a Python streaming Arrow sink, ``availableNow``,
a checkpoint, ``local[2]``), but the source's executors build their 1 KB rows in Arrow
and the sink counts them and drops them. What this query costs per batch and per row is
what Spark itself costs a Python-data-source pipeline on this machine; a bridge can only
add to it. So its steady rate bounds what ``spark_bench.py --scenarios e2e`` can reach here.

    python bench/spark_floor.py --per-trigger 5000 50000 --rows 300000 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from cpu_sampler import CpuSampler  # bench/ is not a package
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from spark_bench import batches_of, spark_session, stream_figures

from leveret.spark_sink.schema import ARROW_BATCH_ROWS
from leveret.spark_sink.source import DEFAULT_PARTITIONS, MIN_PARTITION_MESSAGES

BODY_BYTES = 1024


def _rows(count: int) -> pa.RecordBatch:
    """``count`` rows of ``body binary, message_id string``, built in Arrow (under a
    microsecond a row, about what the leveret source spends decoding its frames): the
    least a source can do is make its rows."""
    offsets = pa.array(range(0, (count + 1) * BODY_BYTES, BODY_BYTES), pa.int32()).buffers()[1]
    body = pa.Array.from_buffers(pa.binary(), count,
                                 [None, offsets, pa.py_buffer(b"x" * (count * BODY_BYTES))])
    ids = pc.binary_join_element_wise(
        "floor-", pc.cast(pa.array(range(count), pa.int64()), pa.string()), "")
    return pa.RecordBatch.from_arrays([body, ids], names=["body", "message_id"])


class Rows(InputPartition):  # type: ignore[misc]
    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.count = count


class FloorReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    def __init__(self, total: int, per_trigger: int) -> None:
        self.total, self.per_trigger = total, per_trigger

    def initialOffset(self) -> dict:
        return {"seq": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        pass  # the rows are ``total`` from the start: nothing arrives later

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        want = limit.max_rows if isinstance(limit, ReadMaxRows) else self.total
        return {"seq": min(self.total, int(start["seq"]) + want)}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        count = int(end["seq"]) - int(start["seq"])
        if count <= 0:
            return []
        parts = max(1, min(DEFAULT_PARTITIONS, count // MIN_PARTITION_MESSAGES))  # as leveret
        size = -(-count // parts)
        return [Rows(min(size, count - at)) for at in range(0, count, size)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Rows)
        batch = _rows(partition.count)
        for at in range(0, partition.count, ARROW_BATCH_ROWS):
            yield batch.slice(at, ARROW_BATCH_ROWS)

    def commit(self, end: dict) -> None:
        pass


class Counted(WriterCommitMessage):  # type: ignore[misc]
    def __init__(self, rows: int) -> None:
        self.rows = rows


class DropWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    def write(self, iterator: Iterator[pa.RecordBatch]) -> Counted:
        return Counted(sum(batch.num_rows for batch in iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


class FloorSource(DataSource):  # type: ignore[misc]
    @classmethod
    def name(cls) -> str:
        return "leveret-floor"

    def schema(self) -> str:
        return "body binary, message_id string"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return FloorReader(int(self.options["rows"]), int(self.options["perTrigger"]))

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamArrowWriter:
        return DropWriter()


def run(spark: Any, rows: int, per_trigger: int, checkpoint: Path) -> dict[str, Any]:
    from pyspark.sql import functions as F

    df = (spark.readStream.format("leveret-floor").option("rows", rows)
          .option("perTrigger", per_trigger).load())
    writer = (df.select("body", "message_id", F.lit("out").alias("routing_key"))
              .writeStream.format("leveret-floor").option("checkpointLocation", str(checkpoint)))
    with CpuSampler(0.1) as cpu:
        started = time.time()
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        finished = time.time()
    out = stream_figures(started, finished, query.recentProgress)
    done = sum(p["numInputRows"] for p in batches_of(query.recentProgress))
    assert done == rows, f"{done} rows of {rows}"
    out["cpu_us_per_row"] = {role: round(s / rows * 1e6, 1)
                             for role, s in sorted(cpu.by_role().items()) if s > 0}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-trigger", type=int, nargs="+", default=[5000, 50000])
    parser.add_argument("--rows", type=int, default=300000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the session (repeatable), as spark_bench's")
    args = parser.parse_args()
    spark = spark_session(args.driver_memory, conf=args.conf)  # the e2e's own settings
    spark.dataSource.register(FloorSource)
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        run(spark, 20000, 10000, Path(tmp) / "warm")  # workers and the JVM's first compiles
        for n, per_trigger in enumerate(args.per_trigger * args.repeat):
            rows = max(args.rows, 3 * per_trigger)
            result = run(spark, rows, per_trigger, Path(tmp) / f"ck{n}")
            results.setdefault(f"floor-{per_trigger}", []).append(result)
            print(f"floor-{per_trigger}: first {result['first_batch_s']} s, steady "
                  f"{result.get('steady_rows_per_s'):,} rows/s, phases {result.get('phases_ms')}, "
                  f"CPU us/row {result['cpu_us_per_row']}", flush=True)
    summary = {name: {"steady_rows_per_s": statistics.median(r["steady_rows_per_s"] for r in runs),
                      "first_batch_s": statistics.median(r["first_batch_s"] for r in runs)}
               for name, runs in results.items()}
    print(json.dumps({"summary": summary, "results": results}))


if __name__ == "__main__":
    main()
