"""The Spark pipeline's broker work without Spark, shared by ``spark_bench.py`` (its
``relay-<n>`` scenario and its fills) and ``icount.py --scenario relay``.

Queues: ``spark-bench-x`` (direct, durable) routes ``bench`` to ``spark-bench`` and ``out``
to ``spark-bench-out``. Uses the bridge's own client (``leveret.spark_sink.amqp_client``),
so the broker sees what the bridge sends.
"""

from __future__ import annotations

from typing import Any


def declare_queues(url: str) -> None:
    """``spark-bench-x`` (direct, durable) -> ``spark-bench`` (key ``bench``) and
    ``spark-bench-out`` (key ``out``), both durable and empty."""
    from leveret.spark_sink.amqp_client import Connection

    with Connection(url) as conn:
        conn.exchange_declare("spark-bench-x")
        for queue, key in (("spark-bench", "bench"), ("spark-bench-out", "out")):
            conn.queue_declare(queue)
            conn.queue_delete(queue)
            conn.queue_declare(queue)
            conn.queue_bind(queue, "spark-bench-x", key)


def relay(url: str, rows: int, per_batch: int, size: int) -> None:
    """The broker's work in the e2e pipeline, without Spark: take ``per_batch`` deliveries
    from ``spark-bench`` (raw, prefetch ``per_batch``), republish each into the exchange with
    confirms (persistent, a new ``message_id``), ack the batch once all are confirmed."""
    from leveret.spark_sink.amqp_client import Connection

    body = b"x" * size
    done = 0
    with Connection(url, raw_deliveries=True) as src, Connection(url) as out:
        src.qos(min(per_batch, 65535))
        src.consume("spark-bench")
        out.confirm_select()
        while done < rows:
            want = min(per_batch, rows - done)
            got: list[Any] = []
            while len(got) < want and (src.raw or src.pump(10)):
                while src.raw and len(got) < want:
                    got.append(src.raw.popleft())
            assert len(got) == want, (done, len(got))
            publish_confirmed(out, "out", f"r{done}-", want, body, window=20000)
            src.ack(got[-1][0])
            done += want


def publish_confirmed(conn: Any, routing_key: str, id_prefix: str, count: int, body: bytes,
                      window: int) -> None:
    """``count`` persistent messages into ``spark-bench-x`` (ids ``<id_prefix><i>``), at most
    ``window`` unconfirmed; returns once all are confirmed (``conn`` in confirm mode)."""
    from leveret.spark_sink import wire

    for i in range(count):
        props = wire.encode_properties({"delivery_mode": 2, "message_id": f"{id_prefix}{i}"})
        conn.publish("spark-bench-x", routing_key, props, body)
        if conn.confirms.outstanding > window:
            conn.wait_window(window // 2)
    conn.wait_window(0)


def fill_with_client(url: str, rows: int, size: int) -> None:
    """Fill ``spark-bench`` without Spark (so no Python worker is started before the query)."""
    from leveret.spark_sink.amqp_client import Connection

    with Connection(url) as conn:
        conn.confirm_select()
        publish_confirmed(conn, "bench", "m", rows, b"x" * size, window=4000)
