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

from leveret.queues.stream import Stream

if TYPE_CHECKING:
    from leveret.management_ui.prometheus import Writer
    from leveret.queues.queue import Queue


def write_streams(w: Writer, queues: Iterable[Queue]) -> None:
    streams = [q for q in queues if isinstance(q, Stream)]
    if not streams:
        return

    def labels(stream: Stream) -> tuple[tuple[str, str], ...]:
        vhost = stream.vhost.name if stream.vhost is not None else "/"
        return (("vhost", vhost), ("queue", stream.name))

    w.family("leveret_stream_first_offset", "gauge", "First offset still in the stream's log",
             [(labels(s), s.first_offset) for s in streams])
    w.family("leveret_stream_next_offset", "gauge", "Offset the stream's next message gets",
             [(labels(s), s.next_offset) for s in streams])
    w.family("leveret_stream_bytes", "gauge", "Body bytes in the stream's log",
             [(labels(s), s.log_bytes) for s in streams])
    w.family("leveret_stream_segments", "gauge", "Segments of the stream's log",
             [(labels(s), s.segment_count) for s in streams])
    lag = []
    for stream in streams:
        for consumer in stream.all_consumers():
            offset = stream.consumer_offset(consumer)
            if offset is not None:
                lag.append(((*labels(stream), ("consumer_tag", consumer.tag)),
                            max(stream.next_offset - offset, 0)))
    w.family("leveret_stream_consumer_lag", "gauge",
             "Messages between a stream consumer's next offset and the end of the log", lag)
