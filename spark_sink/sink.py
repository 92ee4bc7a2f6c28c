"""Writing DataFrames into an exchange: the streaming sink and the batch writer.

Both are Arrow writers: each Spark task receives its partition as Arrow
``RecordBatch``es and hands them to :func:`~.publisher.publish_batches`, which
publishes persistent messages with pipelined confirms and returns once all are
confirmed. The driver-side ``commit`` has nothing left to do: a task that
succeeded has had its messages confirmed, and Spark reruns one that failed.
Published messages cannot be taken back, so ``abort`` cannot undo a partly
written batch: the guarantee is at-least-once, and ``message_id`` is stable
across retries so consumers can deduplicate.

Message ids: ``<prefix><partition>-<index>`` unless the row has a
``message_id``. The streaming sink's prefix is ``<queryId>-<batchId>-``
(both are task local properties: the writer object itself is not told the
batch id); the batch writer's is ``messageIdPrefix`` or a random id drawn once
per write on the driver.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from .publisher import PublishOptions, publish_batches, task_local_property, task_partition_id

BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


@dataclass
class Published(WriterCommitMessage):  # type: ignore[misc]
    partition: int
    count: int


class LeveretBatchWriter(DataSourceArrowWriter):  # type: ignore[misc]
    def __init__(self, options: Mapping[str, str], column_names: list[str]) -> None:
        self.opts = PublishOptions.from_options(options).checked(column_names)
        self.prefix = self.opts.message_id_prefix or f"{uuid.uuid4().hex[:12]}-"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        partition = task_partition_id()
        count = publish_batches(iterator, self.opts, f"{self.prefix}{partition}-")
        return Published(partition, count)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass  # every task confirmed its messages before reporting success


class LeveretStreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    def __init__(self, options: Mapping[str, str], column_names: list[str]) -> None:
        self.opts = PublishOptions.from_options(options).checked(column_names)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        partition = task_partition_id()
        batch_id = task_local_property(BATCH_ID_PROPERTY) or "0"
        query = self.opts.message_id_prefix or (task_local_property(QUERY_ID_PROPERTY) or "q") + "-"
        count = publish_batches(iterator, self.opts, f"{query}{batch_id}-{partition}-")
        return Published(partition, count)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # confirmed messages stay published; Spark reruns the batch (at-least-once)
