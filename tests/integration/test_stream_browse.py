"""The console's peek and search on a stream: by offset or arrival time, consuming nothing."""

from __future__ import annotations

import uuid
from typing import Any

import pika

from .test_streams import STREAM, connect, publish, read


def peek(api: Any, name: str, **body: Any) -> list[dict[str, Any]]:
    status, _, found = api.post(f"/queues/%2F/{name}/peek", body)
    assert status == 200, found
    return list(found)


def test_peek_and_search_a_stream_by_offset_and_time_take_nothing(broker: Any,
                                                                   api: Any) -> None:
    name = f"browse-{uuid.uuid4().hex[:8]}"
    conn = connect(broker)
    conn.channel().queue_declare(name, durable=True, arguments=STREAM)
    publish(conn, name, [b"a%d" % i for i in range(10)],
            [{"n": i} for i in range(10)])
    first = peek(api, name, count=10)
    assert [m["position"] for m in first] == list(range(10))
    publish(conn, name, [b"b%d" % i for i in range(10)])  # later chunks: later arrival

    page = peek(api, name, offset=5, count=3)
    assert [(m["position"], m["payload"]) for m in page] == [(5, "a5"), (6, "a6"), (7, "a7")]
    assert page[0]["properties"]["headers"] == {"n": 5}  # as published: no x-stream-offset
    assert peek(api, name, offset=18, count=10)[-1]["position"] == 19
    assert peek(api, name, offset=500) == []
    # From a time: the first chunk that arrived after the first ten.
    after = peek(api, name, timestamp=first[-1]["timestamp"] + 1, count=3)
    assert [m["payload"] for m in after] == ["b0", "b1", "b2"]
    assert after[0]["timestamp"] > first[-1]["timestamp"]

    status, headers, found = api.post(f"/queues/%2F/{name}/search",
                                      {"body_contains": "b", "offset": 12, "limit": 2})
    assert status == 200
    assert [m["position"] for m in found] == [12, 13]
    assert headers["X-Scanned-Until"] == "14"
    _, _, found = api.post(f"/queues/%2F/{name}/search", {"header": {"n": 3}})
    assert [m["payload"] for m in found] == ["a3"]

    # Nothing was taken: a consumer still reads all twenty from offset 0.
    assert api.get(f"/queues/%2F/{name}")[2]["messages"] == 20
    assert [offset for offset, _, _ in read(conn, name, 20)] == list(range(20))
    assert api.post(f"/queues/%2F/{name}/peek", {"offset": -1})[0] == 400
    status, _, refused = api.request("DELETE", f"/queues/%2F/{name}/messages", {"count": 5})
    assert status == 400 and "is a stream" in refused["reason"], refused
    assert api.post(f"/queues/%2F/{name}/move", {"destination": name, "count": 1})[0] == 400
    assert api.get(f"/queues/%2F/{name}")[2]["messages"] == 20
    conn.channel().queue_delete(name)
    conn.close()


def test_peek_of_a_stream_after_retention_starts_at_its_first_offset(broker: Any,
                                                                api: Any) -> None:
    """Retention moved the first offset: a peek from 0 starts where the log starts."""
    name = f"browse-r-{uuid.uuid4().hex[:8]}"
    conn = connect(broker)
    conn.channel().queue_declare(name, durable=True, arguments={
        **STREAM, "x-max-length-bytes": 1_000, "x-stream-max-segment-size-bytes": 500})
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(30):  # one confirmed batch each: segments close at chunk boundaries
        ch.basic_publish("", name, b"%0100d" % i, pika.BasicProperties())
    first = api.get(f"/queues/%2F/{name}")[2]["stream"]["first_offset"]
    assert first > 0
    assert peek(api, name, offset=0, count=1)[0]["position"] == first
    conn.channel().queue_delete(name)
    conn.close()
