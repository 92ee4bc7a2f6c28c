"""What the management plane shows of a stream, beside a queue's usual fields.

RabbitMQ's management API shows a stream as a queue with ``type: stream`` and
``messages`` = the messages in its log (readers never take any, so none is
"unacknowledged" in its count). Leveret adds the log's shape (first and last
offset and arrival time, segments, bytes) and, per consumer, the offset it
reads next and how far it is behind the end of the log (its lag).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from leveret.queues.consumer import Consumer
from leveret.queues.stream import Stream


def stream_fields(stream: Stream) -> dict[str, Any]:
    count = stream.message_count
    index = stream.log_index
    return {
        "messages": count, "messages_ready": count,
        "stream": {
            "first_offset": stream.first_offset,
            "last_offset": stream.next_offset - 1 if count else None,
            "first_timestamp": index.segments[0].first_ts if index.segments else None,
            "last_timestamp": index.last_ts or None,
            "segments": stream.segment_count,
            "bytes": stream.log_bytes,
        },
    }


def consumer_fields(stream: Stream, consumer: Consumer) -> dict[str, Any]:
    offset = stream.consumer_offset(consumer)
    if offset is None:
        return {}
    return {"stream_offset": offset, "stream_lag": max(stream.next_offset - offset, 0)}


Labels = tuple[tuple[str, str], ...]


def stream_metrics(queues: Iterable[object]) -> tuple[
        list[tuple[Labels, dict[str, int]]], list[tuple[Labels, int]]]:
    """Per stream among ``queues``: its labels and log figures (``first_offset``,
    ``next_offset``, ``bytes``, ``segments``); per stream consumer: its labels and lag."""
    logs: list[tuple[Labels, dict[str, int]]] = []
    lags: list[tuple[Labels, int]] = []
    for stream in queues:
        if not isinstance(stream, Stream):
            continue
        vhost = stream.vhost.name if stream.vhost is not None else "/"
        labels: Labels = (("vhost", vhost), ("queue", stream.name))
        logs.append((labels, {"first_offset": stream.first_offset,
                              "next_offset": stream.next_offset,
                              "bytes": stream.log_bytes, "segments": stream.segment_count}))
        for consumer in stream.all_consumers():
            offset = stream.consumer_offset(consumer)
            if offset is not None:
                lags.append(((*labels, ("consumer_tag", consumer.tag)),
                             max(stream.next_offset - offset, 0)))
    return logs, lags
