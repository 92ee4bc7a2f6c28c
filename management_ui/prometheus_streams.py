"""Leveret's stream series: each stream's log and each stream consumer's lag.

RabbitMQ 3.10 serves its streams' figures from the stream plugin's own
metrics (``rabbitmq_stream_*``), which are about its stream protocol's
publishers and consumers; a stream read over AMQP 0-9-1 shows there only as
a queue. Leveret serves the queue series for a stream as for any queue
(``messages`` is the log's count) and these, with the ``leveret_`` prefix:
where the log starts and ends, its size, and how far behind the end of the log
each consumer reads (``stream_lag`` in the management API).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from leveret.broker.stream_inventory import stream_metrics

if TYPE_CHECKING:
    from leveret.management_ui.prometheus import Writer

LOG_SERIES = (
    ("leveret_stream_first_offset", "first_offset", "First offset still in the stream's log"),
    ("leveret_stream_next_offset", "next_offset", "Offset the stream's next message gets"),
    ("leveret_stream_bytes", "bytes", "Body bytes in the stream's log"),
    ("leveret_stream_segments", "segments", "Segments of the stream's log"),
)


def write_streams(w: Writer, queues: Iterable[object]) -> None:
    logs, lags = stream_metrics(queues)
    if not logs:
        return
    for name, key, help_ in LOG_SERIES:
        w.family(name, "gauge", help_, [(labels, figures[key]) for labels, figures in logs])
    w.family("leveret_stream_consumer_lag", "gauge",
             "Messages between a stream consumer's next offset and the end of the log", lags)
