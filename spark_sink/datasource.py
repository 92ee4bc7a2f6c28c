"""The ``leveret`` data source: Spark's entry point, dispatching to reader and writers."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .schema import schema_ddl
from .sink import LeveretBatchWriter, LeveretStreamWriter
from .source import LeveretBatchReader, LeveretStreamReader
from .stream_source import StreamBatchReader, StreamOffsetReader


def _is_stream(options: Mapping[str, str]) -> bool:
    """Option ``stream=true``: the queue is a stream, read by offset (nothing consumed)."""
    opts = {k.lower(): v for k, v in options.items()}
    return str(opts.get("stream", "false")).strip().lower() == "true"


class LeveretDataSource(DataSource):  # type: ignore[misc]
    """AMQP 0-9-1 queues as a source, exchanges as a sink (Leveret or RabbitMQ)."""

    @classmethod
    def name(cls) -> str:
        return "leveret"

    def schema(self) -> str:
        opts = {k.lower(): v for k, v in self.options.items()}
        return schema_ddl(str(opts.get("headersasjson", "false")).strip().lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        if _is_stream(self.options):
            return StreamBatchReader(self.options, schema)
        return LeveretBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if _is_stream(self.options):
            return StreamOffsetReader(self.options, schema)  # by offset, nothing consumed
        return LeveretStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ValueError("the leveret sink only appends (publishing cannot overwrite)")
        return LeveretBatchWriter(self.options, schema.fieldNames())

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return LeveretStreamWriter(self.options, schema.fieldNames())
