"""Scrapes that cannot stop the broker, and the Prometheus listener's optional login
(``management_ui/metrics_app.py``).

With many queues, ``/metrics/per-object`` is rendered in slices and streamed, one
rendering per endpoint at a time (scrapers arriving meanwhile share the next): AMQP
clients are served between the slices. The test counts AMQP round trips that complete
while a scrape still waits for the first byte of its metrics, an ordering, not a
duration: a scrape rendered in one go sends its first byte only after it has held the
loop for all of its rendering, with no round trip in between.
"""

from __future__ import annotations

import base64
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pika

from tests.integration.conftest import HttpApi

QUEUES = 20_000
SCRAPES = 4
# Round trips that must complete while the last scrape still waits for its first byte (a
# scrape rendered in one go let 4 through here, one rendered in slices 90 to 700).
SEVERAL = 20


def _scrape(url: str, started: list[float], answered: list[float], sizes: list[int]) -> None:
    started.append(time.monotonic())
    with urllib.request.urlopen(url, timeout=600) as resp:
        total = len(resp.read(1))
        answered.append(time.monotonic())  # the first byte of the metrics is in
        while chunk := resp.read(1 << 20):
            total += len(chunk)
    sizes.append(total)


def test_amqp_is_served_while_large_scrapes_render(make_broker: Any) -> None:
    broker = make_broker()
    api = HttpApi(broker.api_url + "/api")
    queues = [{"name": f"scrape-{i:05d}", "vhost": "/", "durable": False,
               "auto_delete": False, "arguments": {}} for i in range(QUEUES)]
    status, _, body = api.post("/definitions", {"queues": queues})
    assert status in (200, 201, 204), body

    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    stop = threading.Event()
    done: list[float] = []  # when each queue.declare(passive) round trip completed

    def ping() -> None:
        while not stop.is_set():
            ch.queue_declare("scrape-00000", passive=True)
            done.append(time.monotonic())

    started: list[float] = []
    answered: list[float] = []
    sizes: list[int] = []
    scrapers = [threading.Thread(target=_scrape, args=(
        broker.metrics_url + "/metrics/per-object", started, answered, sizes))
        for _ in range(SCRAPES)]
    pinger = threading.Thread(target=ping)
    pinger.start()
    try:
        for t in scrapers:
            t.start()
        for t in scrapers:
            t.join()
    finally:
        stop.set()
        pinger.join()
        conn.close()
    assert len(sizes) == SCRAPES and min(sizes) > QUEUES * 100, sizes
    window = (max(started), max(answered))  # every scrape asked, one without a byte yet
    during = [t for t in done if window[0] < t < window[1]]
    print(f"{len(during)} of {len(done)} round trips while a scrape was waiting")
    assert len(during) >= SEVERAL, (len(during), len(done))


def _get(url: str, user: str | None = None, password: str = "pw") -> tuple[int, Any, bytes]:
    req = urllib.request.Request(url)
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def test_authentication_off_by_default(broker: Any) -> None:
    assert _get(broker.metrics_url + "/metrics")[0] == 200


def test_authentication_on_takes_monitoring_users(make_broker: Any) -> None:
    broker = make_broker(None, LEVERET_PROMETHEUS_AUTHENTICATION="true")
    api = HttpApi(broker.api_url + "/api")
    for user, tags in (("mon", "monitoring"), ("mgmt", "management"), ("plain", "")):
        assert api.put(f"/users/{user}", {"password": "pw", "tags": tags})[0] == 201
    base = broker.metrics_url
    for path in ("/metrics", "/metrics/per-object", "/metrics/detailed?family=vhost_status"):
        status, headers, body = _get(base + path)
        assert (status, body) == (401, b"") and headers["WWW-Authenticate"].startswith("Basic")
        status, headers, body = _get(base + path, "mon", "wrong")
        assert status == 401 and b"Login failed" in body and headers["WWW-Authenticate"]
        for user in ("mgmt", "plain"):  # logged in, without the tag: 401, as the API's
            status, headers, body = _get(base + path, user)
            assert status == 401 and b"Not monitor user" in body, (user, body)
            assert headers["WWW-Authenticate"]
        status, _, body = _get(base + path, "mon")
        assert status == 200 and b"rabbitmq_identity_info" in body
        assert _get(base + path, "guest", "guest")[0] == 200  # an administrator
