"""Spark bridge: AMQP queues as a PySpark source, exchanges as a sink.

::

    from leveret.spark_sink import register, publisher
    register(spark)                      # the "leveret" format
    df = spark.readStream.format("leveret").option("url", url).option("queue", "in").load()
    df.writeStream.format("leveret").option("url", url).option("exchange", "out") \\
        .option("checkpointLocation", ck).start()
    df.writeStream.foreachBatch(publisher(url, exchange="out")).start()

Modules: :mod:`.schema` (row schema, Arrow conversion), :mod:`.source`
(stream and batch readers), :mod:`.ledger` (seq/ack bookkeeping),
:mod:`.sink` (stream and batch writers), :mod:`.publisher` (confirming
publisher, ``foreachBatch``), :mod:`.amqp_client` and :mod:`.wire` (a small
blocking AMQP client with hand-written hot paths). Needs ``pyspark>=4`` and
``pyarrow`` (the ``spark`` extra); importing this package does not import
Spark until :func:`register` is called.
"""

from __future__ import annotations

from typing import Any

__all__ = ["publisher", "register"]


def register(spark: Any) -> None:
    """Register the ``leveret`` format on ``spark`` (a SparkSession)."""
    from .datasource import LeveretDataSource

    spark.dataSource.register(LeveretDataSource)


def publisher(url: str, exchange: str = "", **kwargs: Any) -> Any:
    """A ``foreachBatch`` function publishing each micro-batch (see :func:`.publisher.publisher`)."""
    from .publisher import publisher as make

    return make(url, exchange, **kwargs)
