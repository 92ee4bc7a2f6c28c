"""A real Celery worker running a ``countdown`` task on Leveret.

Celery 5.5+ schedules countdown/ETA tasks in the broker itself when its task queues are
quorum queues ("native delayed delivery"): the worker declares kombu's 28 levels of topic
exchanges and TTL'd, dead-lettering quorum queues at start, and ``apply_async(countdown=)``
publishes to ``celery_delayed_27`` with the countdown's bits in the routing key
(``test_kombu_celery.py`` drives that topology through kombu alone). Here the whole path
runs as users run it: a worker (in-process, threads) consuming a quorum queue, a task
published with a countdown, executed once, not before its time.

Its own broker: the worker declares the unprefixed ``celery_delayed_*`` topology in ``/``.
"""

from __future__ import annotations

import threading
import time

import pytest

celery = pytest.importorskip("celery")
from celery.contrib.testing.worker import start_worker  # noqa: E402

WAIT = 120.0  # a bound for a task that is due, not a budget: the wait ends when it runs


def test_countdown_task_runs_once_after_its_countdown(make_broker, qname):
    b = make_broker()
    app = celery.Celery("leveret-test", broker=b.url.replace("amqp://", "pyamqp://", 1),
                        set_as_current=False)
    app.conf.update(
        task_default_queue=qname,
        task_default_exchange=qname,
        task_default_exchange_type="topic",  # native delayed delivery skips direct exchanges
        task_default_routing_key=qname,
        task_default_queue_type="quorum",
        broker_native_delayed_delivery_queue_type="quorum",
        worker_detect_quorum_queues=True,
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
    )
    runs: list[tuple[float, float, str]] = []
    ran = threading.Event()

    @app.task(name="stamp", bind=True)
    def stamp(self: celery.Task, sent: float) -> None:
        runs.append((sent, time.time(), self.request.delivery_info.get("routing_key", "")))
        ran.set()

    with start_worker(app, pool="solo", perform_ping_check=False, loglevel="WARNING",
                      shutdown_timeout=30):
        # The worker declared the delayed-delivery topology as it started (its bootstep).
        sent = time.time()
        stamp.apply_async((sent,), countdown=3)
        assert ran.wait(WAIT), "the countdown task never ran"
        time.sleep(0.5)  # a second run would be right behind (a wait for an absence)
    assert len(runs) == 1
    (stamped, ran_at, routing_key), = runs
    assert stamped == sent and ran_at >= sent + 3
    # It went through the broker's delay levels (3 s = bits 1, 1), not the worker's memory.
    assert routing_key == "0." * 26 + "1.1." + qname
